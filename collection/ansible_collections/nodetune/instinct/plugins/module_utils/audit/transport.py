# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The findings transport from the node to the controller: encoded once on the node, decoded in one function.

A verify result carries every finding, about 1,800 on a full-size MI300X node. Returned as a list of dicts they cost
Ansible more controller CPU than the audit costs the node (it walks every value of a result to hide ``no_log``
values), so the modules return them as one JSON text (``findings_format: json``) and the report without them
(:func:`compact`). Every reader on the controller - the action plugins, the filters and the fleet reports, the
Python API - takes them back with :func:`decode` and puts a report back together with :func:`report_with`;
:func:`expanded` does both for a whole verify result, :func:`with_findings` puts a list in one.

A rerun whose findings are those the controller already holds in the node's report file does not send them again:
the action plugins pass the SHA-256 of the findings that file holds (``known_findings``, read by
plugin_utils/report_files.held_report), the module always returns the SHA-256 of its own (:data:`FINDINGS_SHA256`)
and, where they are equal, :data:`FINDINGS_KNOWN` in place of the text; the controller then writes the new report
around the findings of the file it holds. The node still audits every value: only the transfer is spared.

Standard library only: the node imports it too.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: they are postponed, so typing is never imported at run time
    from typing import Any, Dict, List, Optional

FORMATS = ("list", "json")
FINDINGS = "findings"
REPORT = "report"
#: the SHA-256 (hex) of the findings' JSON text (:func:`encode`), in a compact result and in the node's report file
FINDINGS_SHA256 = "findings_sha256"
#: true where the findings are those the controller holds (their SHA-256 is ``known_findings``): not sent again
FINDINGS_KNOWN = "findings_known"


class TransportError(ValueError):
    """The findings of a result are text that is not a JSON list."""


def encode(findings: List[Dict[str, Any]]) -> str:
    """The findings as one compact JSON text."""
    return json.dumps(findings, separators=(",", ":"))


def digest(text: str) -> str:
    """The SHA-256 (hex) of a findings text (:func:`encode`)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def compact(result: Dict[str, Any], findings: List[Dict[str, Any]], findings_format: str,
            known: Optional[str] = None) -> Dict[str, Any]:
    """``result`` (a verify result whose ``report`` holds ``findings``) as the module returns it: with
    ``findings_format`` ``json``, the findings as one JSON text with its SHA-256, and the report without them;
    ``list`` leaves it. ``known``: the SHA-256 of the findings the controller holds; where this text has it, the
    text is left out and ``findings_known`` is true."""
    if findings_format != "json":
        return result
    text = encode(findings)
    result[FINDINGS_SHA256] = digest(text)
    if known is not None and known == result[FINDINGS_SHA256]:
        result.pop(FINDINGS, None)
        result[FINDINGS_KNOWN] = True
    else:
        result[FINDINGS] = text
    if isinstance(result.get(REPORT), dict):
        result[REPORT] = dict((k, v) for k, v in result[REPORT].items() if k != FINDINGS)
    return result


def decode(value: Any) -> Optional[List[Any]]:
    """A result's ``findings`` as a list: the JSON text decoded, a list as it is; None for anything else (a failed
    result holds none). Raises TransportError for text that is not a JSON list."""
    if isinstance(value, list):
        return value
    if not isinstance(value, str):
        return None
    try:
        findings = json.loads(value)
    except ValueError as exc:
        raise TransportError("the findings are not valid JSON: %s" % exc) from None
    if not isinstance(findings, list):
        raise TransportError("the findings are JSON %s, not a list" % type(findings).__name__)
    return findings


def report_with(report: Mapping[str, Any], findings: List[Any]) -> Dict[str, Any]:
    """A new report with ``findings``, in the module's key order: right after ``summary`` (at the end where it has
    none), in place of any it had."""
    keys = [k for k in report if k != FINDINGS]
    position = keys.index("summary") + 1 if "summary" in keys else len(keys)
    merged = dict((k, report[k]) for k in keys[:position])
    merged[FINDINGS] = findings
    merged.update((k, report[k]) for k in keys[position:])
    return merged


def with_findings(result: Mapping[str, Any], findings: List[Any]) -> Dict[str, Any]:
    """A verify result (or a report) with ``findings`` as its one list: in ``findings`` and, where it has a report, in
    the report too (:func:`report_with`); a new dict."""
    out = dict(result)
    out[FINDINGS] = findings
    if isinstance(result.get(REPORT), Mapping):
        out[REPORT] = report_with(result[REPORT], findings)
    return out


def expanded(result: Any, findings: Optional[List[Any]] = None) -> Any:
    """A verify result with its findings as one list, shared by ``findings`` and ``report`` (a new dict; the one given
    is left as it is); ``findings``: that list where it is decoded already. A result with no findings text, and
    anything that is not a mapping, comes back as it is."""
    if not isinstance(result, Mapping) or not isinstance(result.get(FINDINGS), str):
        return result
    return with_findings(result, decode(result[FINDINGS]) if findings is None else findings)
