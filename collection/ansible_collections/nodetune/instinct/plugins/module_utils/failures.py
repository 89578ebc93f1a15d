# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Why a module stopped, as data.

Each module lists its refusals as rows of (exception class, message prefix, extra result fields), a subclass before
its base (``BiosConfigError`` and ``JournalError`` before ``SettingError``); :func:`failure` turns the first row
that matches into ``fail_json``'s arguments. The message is the prefix and the exception's own text (a
``SettingError`` already joins its errors with "; ").
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence, Tuple

Extra = Optional[Callable[[Any], Dict[str, Any]]]
Row = Tuple[type, str, Extra]


def errors_of(exc: Any) -> Dict[str, Any]:
    return {"errors": list(exc.errors)}


def path_of(exc: Any) -> Dict[str, Any]:
    return {"path": exc.path}


def failure(exc: BaseException, table: Sequence[Row]) -> Dict[str, Any]:
    """``fail_json``'s arguments for ``exc``: the first row whose class it is an instance of; an exception no row
    names is raised again (the modules catch Exception and let this decide)."""
    for cls, prefix, extra in table:
        if isinstance(exc, cls):
            return dict(extra(exc) if extra else {}, msg=prefix + str(exc))
    raise exc
