"""Lyra's Helm chart (``helm/lyra``): its typed values (:mod:`values`), the files generated into it (:mod:`sources`)
and ``manifests/`` rendered from it (:mod:`rendering`)."""
