# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Controller side of an audit's results, shared by the tune and verify action plugins (and fleet_report): the
findings back from their JSON transport text (module_utils/audit/transport.py), the node's JSON report written on
the controller, a host failed on
drift after its report is written, and the inventory each node's group majority taught the fleet report, kept for
the next apply (``<report dir>/learned/<host>.json``)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import json
import math
import os
import stat
import tempfile

from ansible.errors import AnsibleError

from ansible_collections.nodetune.instinct.plugins.module_utils.audit import inventory as inventory_mod
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import outliers as outliers_mod
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import transport
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.finding import group_findings
from ansible_collections.nodetune.instinct.plugins.module_utils.json_text import one_per_line
from ansible_collections.nodetune.instinct.plugins.module_utils.audit.report import report_file_name

LEARNED_DIR = "learned"
LEARNED_VERSION = 1
#: the most nodetune reads of one file it did not write in this run (a full-size node's report: about 1.3 MB)
MAX_READ_BYTES = 64 << 20


# ------------------------------------------------------------------------------------------------ reading
# Every file the controller reads that it did not write in this run (node reports, failure records, learned files)
# may be anything: a link, a FIFO (opened for reading, it blocks until a writer comes), a device (/dev/zero reads
# without end), a file of gigabytes, JSON nested past the recursion limit or with 1e400 in it.
class SkippedFile(OSError):
    """A file nodetune does not read: ``what`` it is (not a regular file, or larger than :data:`MAX_READ_BYTES`)."""

    def __init__(self, code, what):
        super(SkippedFile, self).__init__(code, "it is %s: skipped, not read" % what)
        self.what = what

    def __str__(self):
        return str(self.strerror)


_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _not_regular(mode):
    kind = next((name for test, name in _KINDS if test(mode)), "something else")
    return SkippedFile(errno.EINVAL, "%s, not a regular file" % kind)


def read_regular(path, limit=None):
    """The bytes of the regular file at ``path``, at most ``limit`` of them (default :data:`MAX_READ_BYTES`); a link
    is not followed, a FIFO not waited on, a device not read (never opened, and checked again on the open file).
    Raises SkippedFile, or the OSError of the open or read (FileNotFoundError where there is no file)."""
    limit = MAX_READ_BYTES if limit is None else limit
    mode = os.lstat(path).st_mode
    if not stat.S_ISREG(mode):
        raise _not_regular(mode)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a link swapped in since the lstat
            raise _not_regular(stat.S_IFLNK) from None
        raise
    try:
        held = os.fstat(fd)
        if not stat.S_ISREG(held.st_mode):  # swapped since the lstat
            raise _not_regular(held.st_mode)
        chunks = []
        left = limit + 1 if held.st_size <= limit else 0
        while left > 0:  # to the end, or one byte past the limit (a file that grows while it is read)
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    if left <= 0:
        raise SkippedFile(errno.EFBIG, "larger than the %d bytes nodetune reads of a file (%d bytes)"
                          % (limit, max(held.st_size, limit + 1)))
    return b"".join(chunks)


def _finite(text):
    value = float(text)
    if math.isinf(value):
        raise ValueError("the number %s is out of range" % text[:40])
    return value


def _no_constant(name):
    raise ValueError("%s is not a JSON number" % name)


def loads(text):
    """json.loads for a file nodetune did not write in this run: a number out of range (1e400), NaN, Infinity or
    nesting past the recursion limit is a ValueError as any other invalid JSON, not a value or a traceback."""
    try:
        return json.loads(text, parse_float=_finite, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def read_json(path):
    """The decoded JSON of the regular file at ``path`` (:func:`read_regular`, :func:`loads`). Raises OSError
    (SkippedFile, FileNotFoundError) or ValueError (not UTF-8, not valid JSON)."""
    return loads(read_regular(path).decode("utf-8"))


def expand_findings(result, findings=None):
    """The module's JSON text of findings back into one list, shared by ``findings`` and ``report``, in place
    (transport.expanded; ``findings``: the list where it is decoded already)."""
    try:
        result.update(transport.expanded(result, findings))
    except transport.TransportError as exc:
        raise AnsibleError("nodetune returned verify findings that are not valid: %s" % exc) from None


def decoded_findings(result):
    """The findings of a verify result as a list (transport.decode), or None where it holds none."""
    try:
        return transport.decode(result.get(transport.FINDINGS))
    except transport.TransportError as exc:
        raise AnsibleError("nodetune returned verify findings that are not valid: %s" % exc) from None


def held_report(path):
    """The node's report file at ``path`` as text, and the SHA-256 of its findings (``findings_sha256``), where it
    is one this collection wrote with that digest and its findings can be taken over verbatim; else (None, None).
    The action plugins pass the digest to the module (``known_findings``) and keep the text for
    :func:`finish_audit`."""
    try:
        text = read_regular(path).decode("utf-8")
    except (IOError, OSError, UnicodeDecodeError):
        return None, None
    at = text.find(_DIGEST_LINE)
    digest = text[at + len(_DIGEST_LINE):at + len(_DIGEST_LINE) + 64] if at >= 0 else ""
    if not _is_sha256(digest) or text[at + len(_DIGEST_LINE) + 64:at + len(_DIGEST_LINE) + 66] != '",' \
            or _verbatim_part(text) is None:
        return None, None
    return text, digest


def offer_held_report(options, controller):
    """Where the node's report file holds findings with their digest, give the module that digest
    (``known_findings`` in its ``options``) and keep the file's text for :func:`finish_audit`
    (``controller["held_report"]``). A task's own ``known_findings`` is left as it is, and nothing is held for it."""
    if not controller.get("report_file") or "known_findings" in options:
        return
    text, digest = held_report(controller["report_file"])
    if digest:
        options["known_findings"] = digest
        controller["held_report"] = text


def finish_audit(result, audit, controller):
    """Write the node's report on the controller, then fail the host on drift where asked (``result`` is the task
    result, ``audit`` the verify result inside it or the same dict). A host failed for drift keeps its report and
    says so with ``failed_on_drift``, so the fleet reports count it as drifted, not as a node verify could not
    run on. Returns the audit's findings (decoded once; None where the module left them out as the ones the
    controller holds, unless the host fails for drift) and the report file written, or None where none was.

    ``controller["held_report"]``: the text of the node's report file whose findings' digest the module was given
    (:func:`held_report`); where the module says they are the same (``findings_known``), the new report takes
    them, and their ``checks``, from that text as they are."""
    report = audit.get(transport.REPORT)
    findings = decoded_findings(audit)
    held = controller.get("held_report") if audit.get(transport.FINDINGS_KNOWN) else None
    if audit.get(transport.FINDINGS_KNOWN) and held is None:
        result.update(failed=True, msg="nodetune verify: the module left out the findings as the ones the "
                                       "controller holds, and it holds none (known_findings is the action "
                                       "plugin's to set)")
        return None, None
    written = None
    if controller.get("report_file") and isinstance(report, dict) and not result.get("failed"):
        if findings is not None:
            report = transport.report_with(report, findings)
        digest = audit.get(transport.FINDINGS_SHA256)
        try:
            if held is not None:
                findings = _write_around(controller["report_file"], report, digest, held,
                                         controller.get("report_extra"))
            else:
                if digest and findings is not None:  # in the report's head: held_report finds it there
                    report = _before_findings(report, transport.FINDINGS_SHA256, digest)
                if controller.get("report_extra"):  # the run and the host's groups, for fleet reports over runs
                    report = with_checks(dict(report, **controller["report_extra"]))
                write_report(controller["report_file"], report)
        except (IOError, OSError) as exc:
            result.update(failed=True, msg="nodetune verify: the report %s could not be written on the "
                                           "controller: %s" % (controller["report_file"], exc))
            return findings, None
        except ValueError as exc:  # the held report's findings were to be decoded, and are not valid JSON
            result.update(failed=True, msg=_held_invalid(controller["report_file"], exc))
            return None, None
        written = controller["report_file"]
    if held is not None and findings is None and controller.get("fail_on_drift") and audit.get("drift"):
        try:  # the drift message names the first drifting findings
            findings = json.loads(held).get(transport.FINDINGS)
        except ValueError as exc:
            result.update(failed=True, msg=_held_invalid(controller["report_file"], exc))
            return None, written
    if controller.get("fail_on_drift") and audit.get("drift") and not result.get("failed"):
        ids = ((audit.get("summary") or {}).get("drift_ids")) or []
        where = " (details in %s)" % controller["report_file"] if controller.get("report_file") else ""
        result.update(failed=True, failed_on_drift=True,
                      msg="nodetune verify found drift: %s%s" % (", ".join(ids), where))
    return findings, written


# The node's report file as write_report writes it: a line per top-level key; ``checks`` (where written) right before
# ``findings``, whose list has a line per finding (json_text.one_per_line). No other key's value spans lines.
_DIGEST_LINE = '\n    "%s": "' % transport.FINDINGS_SHA256
_CHECKS_LINE = '\n    "checks": '
_FINDINGS_LINE = '\n    "findings": '
_LIST_END = "\n    ]"
_HELD = "nodetune: the findings of the held report"  # stands for the held text's lines while the new one is encoded


def _is_sha256(text):
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)


def _verbatim_part(text):
    """(start, end, has_checks) of the held report's ``checks`` line (where it has one) and ``findings`` lines,
    from the start of the first to the end of the last (no comma, no newline around); None where it has none."""
    at = text.find(_FINDINGS_LINE)
    if at < 0:
        return None
    value = at + len(_FINDINGS_LINE)
    if text.startswith("[]", value):
        end = value + 2
    elif text.startswith("[\n", value):
        end = text.find(_LIST_END, value)  # the findings' own lines never hold a newline: the first closes it
        if end < 0:
            return None
        end += len(_LIST_END)
    else:
        return None
    start = text.rfind("\n", 0, at) if text[at - 1:at] == "," else -1
    has_checks = start >= 0 and text.startswith(_CHECKS_LINE, start)
    return (start + 1 if has_checks else at + 1), end, has_checks


def _write_around(path, report, digest, held, extra):
    """Write the node's new ``report`` (without findings) around the findings, and their checks, of the ``held``
    text, verbatim: the same file :func:`write_report` writes from the same findings, without decoding and
    encoding them again. Where the held text's layout does not fit this report (``checks`` in one and not the
    other), its findings are decoded and the report written whole. Returns None, or the findings where decoded."""
    start, end, has_checks = _verbatim_part(held)
    document = _before_findings(transport.report_with(report, _HELD), transport.FINDINGS_SHA256, digest)
    if extra:
        document = _before_findings(dict(document, **extra), "checks", _HELD)
    text = one_per_line(document, transport.FINDINGS, indent=4, ensure_ascii=False)
    marker = ('    "checks": "%s",\n' % _HELD if extra else "") + '    "findings": "%s"' % _HELD
    if has_checks == bool(extra) and text.count(marker) == 1:
        write_text(path, text.replace(marker, held[start:end]))
        return None
    findings = json.loads(held).get(transport.FINDINGS)
    document[transport.FINDINGS] = findings
    write_report(path, with_checks(document) if extra else document)
    return findings


def _before_findings(report, key, value):
    """A new report with ``key`` set to ``value`` right before its ``findings`` (in place of any it had)."""
    out = {}
    for name, item in report.items():
        if name == transport.FINDINGS:
            out[key] = value
        if name != key:
            out[name] = item
    return out


def _held_invalid(path, exc):
    return ("nodetune verify: the report %s on the controller is not valid JSON (%s): remove it, and the next run "
            "writes it whole" % (path, exc))


def write_report(path, report):
    """The node's report: a line per top-level key and per finding (written at every run for every node, so by
    the C encoder: ``to_nice_json`` costs the controller more than the audit costs the node)."""
    write_text(path, one_per_line(report, "findings", indent=4, ensure_ascii=False))


def with_checks(report):
    """The report with ``checks`` (its findings grouped per check id, finding.group_findings) right before its
    findings: a fleet report over report files reads them instead of decoding every finding
    (plugin_utils/fleet_reports.py), most of the cost of reading a full-size node's report."""
    findings = report.get("findings")
    if not isinstance(findings, list):
        return report
    return _before_findings(report, "checks", group_findings(findings))


def write_text(path, text):
    """Atomically, mode 0644, creating the directory: a reader never sees half a report."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, 0o755, exist_ok=True)  # the forks of one play write their nodes' reports at once
    handle, tmp = tempfile.mkstemp(prefix=".nodetune-report-", dir=directory)
    try:
        # a lone surrogate (JSON can hold one) as its escape: in a JSON string the same text, not a traceback
        with os.fdopen(handle, "w", encoding="utf-8", errors="backslashreplace") as out:
            out.write(text)
        os.chmod(tmp, 0o644)
        os.rename(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# ------------------------------------------------------------------------------------------------ learned inventory
# The fleet report (run_once, every host's facts in view) learns each node's expectation from its group majority;
# the next apply runs per host and sees only its own. So the expectation waits on the controller, one small file per
# host beside the reports (nodes/<host>.json), read by the tune and verify actions of that host only.
def learned_path(report_dir, host):
    """``<report_dir>/learned/<host>.json``, the host name %-encoded as for its report."""
    return os.path.join(str(report_dir), LEARNED_DIR, report_file_name(host))


def read_learned(path):
    """The learned expectation kept at ``path`` (``expected`` and ``groups``, as inventory.validate_learned takes
    them), or None where there is none; raises ValueError naming the file and what is wrong with it."""
    remove = "(written by the fleet report of a verify run: remove it, and the next verify learns again)"
    try:
        data = read_json(path)
    except FileNotFoundError:
        return None
    except (IOError, OSError) as exc:
        raise ValueError("the learned inventory %s cannot be read on the controller: %s" % (path, exc)) from None
    except ValueError as exc:
        raise ValueError("the learned inventory %s is not valid JSON (%s) %s" % (path, exc, remove)) from None
    if not isinstance(data, dict) or data.get("version") != LEARNED_VERSION:
        raise ValueError("the learned inventory %s is not one the fleet report writes (a mapping with version %d, "
                         "expected and groups) %s" % (path, LEARNED_VERSION, remove))
    learned = dict((key, value) for key, value in data.items() if key != "version")
    try:
        inventory_mod.validate_learned(learned, "learned")
    except inventory_mod.InventoryConfigError as exc:
        raise ValueError("the learned inventory %s is not valid: %s %s" % (path, "; ".join(exc.errors), remove)) \
            from None
    return learned


def keep_learned(path, learned, action):
    """Do ``action`` (outliers.learned_file_action: write, delete or keep) with the host's file; a file that
    already says the same is not rewritten. Returns whether the file changed."""
    if action == "delete":
        if os.path.lexists(path):
            os.unlink(path)
            return True
        return False
    if action != "write":
        return False
    text = json.dumps(dict(learned, version=LEARNED_VERSION), indent=1, sort_keys=True) + "\n"
    try:
        if read_regular(path) == text.encode("utf-8"):
            return False
    except (IOError, OSError):
        pass
    write_text(path, text)
    return True


def add_learned_to_report(path, findings):
    """The node's report file on the controller with its learned findings and its summary counted again
    (outliers.with_learned); nothing where the run wrote no report for the node. Returns whether it was
    rewritten."""
    try:
        report = read_json(path)
    except FileNotFoundError:
        return False
    except ValueError as exc:
        raise IOError("the report %s is not valid JSON: %s" % (path, exc)) from None
    updated = outliers_mod.with_learned(report, findings)
    write_report(path, with_checks(updated) if "checks" in report else updated)
    return True
