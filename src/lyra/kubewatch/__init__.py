"""List-and-watch caches of Kubernetes objects, shared by the operator and the scheduler extender.

One implementation (:mod:`lyra.kubewatch.cache`) keeps a kind's objects current: a paginated initial list, a watch
resumed from the last resourceVersion it saw (bookmarks keep that version fresh), a re-list only when the server answers
``410 Gone`` (a reader that waits in vain for an event may ask the watch to be reopened from the last version seen,
:meth:`WatchCache.resume`, which lists nothing), and objects slimmed to the fields Lyra reads before they are stored
(:mod:`lyra.kubewatch.kinds`, which also says which objects of a kind are kept and with which selector). It is a package
of its own because the operator and the extender are independent adapters: both import it, it imports neither
(import-linter contracts in ``pyproject.toml``).
"""

from lyra.kubewatch.cache import ApiSource, GoneError, Source, WatchCache, WatchError, list_all
from lyra.kubewatch.kinds import Kind

__all__ = ["ApiSource", "GoneError", "Kind", "Source", "WatchCache", "WatchError", "list_all"]
