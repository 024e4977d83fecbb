"""``lyra check``: the invariants Lyra's operator keeps, checked over the objects of a cluster.

An oracle for the operator, so it shares no code with it: :mod:`lyra.check.invariants` reads the raw JSON objects
itself (only the spelled names of :mod:`lyra.api.names` and the loan states of :class:`lyra.core.model.LoanState`
are shared) and is pure; ``lyra.cli.check_commands`` lists the objects and prints the report. An import-linter
contract in ``pyproject.toml`` keeps both apart from the operator, the extender and the API's readers.
"""
