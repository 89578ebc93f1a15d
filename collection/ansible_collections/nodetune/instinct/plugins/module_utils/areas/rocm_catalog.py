# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The environment variables that RCCL, ROCr (HSA_*), HIP and PyTorch really read, as data with validators.

Why a catalogue: the articles users copy from set names nothing reads (``RCCL_ALGO``, ``NCCL_TIMEOUT``,
``HSA_AMD_ENABLE_ASYNC_IO``...) and values the libraries misread without a word (RCCL parses numbers with
``strtoll``, so ``NCCL_BUFFSIZE=4M`` is 4 bytes and ``RCCL_LL128_FORCE_ENABLE=true`` is 0; it compares
``NCCL_NET_GDR_LEVEL`` case-sensitively and ignores what it does not know). Each entry says which component
reads the variable, what values it accepts and why, so a wrong value is refused with the right one, and
docs/rocm.md is written from the same facts. ``WRONG_NAMES`` maps each name from the articles to the real name,
or to ``None`` with the reason it has no effect.

Pure data and pure functions: no I/O, so the tune module, the verify module and the tests share it.
"""

from __future__ import annotations

import re
from typing import Callable, Dict, List, Optional, Tuple

# ------------------------------------------------------------------------------------------------ value rules
ALGORITHMS = ("Ring", "Tree", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree")
PROTOCOLS = ("LL", "LL128", "Simple")
GDR_LEVELS = ("LOC", "XGMI", "PIX", "PXB", "PHB", "SYS")
# NCCL's "old numbering" of path levels (paths.cc levelsOldToNew): what a numeric NCCL_NET_GDR_LEVEL means
GDR_OLD_NUMBERS = ("LOC", "PIX", "PXB", "PHB", "SYS", "SYS")
# RCCL src/debug.cc (ncclDebugInit, strcasecmp): NONE also silences the fatal-error lines, ABORT sits between INFO
# and TRACE
DEBUG_LEVELS = ("NONE", "VERSION", "WARN", "INFO", "ABORT", "TRACE")
DEBUG_SUBSYSTEMS = ("INIT", "COLL", "P2P", "SHM", "NET", "GRAPH", "TUNING", "ENV", "ALLOC", "CALL", "PROXY",
                    "NVLS", "BOOTSTRAP", "REG", "PROFILE", "RAS", "ALL")
MAX_SOCKET_THREADS = 16
MAX_SOCKETS = 64  # NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD

_INT = re.compile(r"^-?(0|[1-9][0-9]*)$")
_IFACE_LIST = re.compile(r"^\^?=?[A-Za-z0-9_.\-]+(:[0-9]+)?(,[A-Za-z0-9_.\-]+(:[0-9]+)?)*$")
_PATH = re.compile(r"^/[A-Za-z0-9_.%+@:,/\-]*$")
_PLUGIN = re.compile(r"^[A-Za-z0-9_.+\-]+$")
_WORD_LIST = re.compile(r"^\^?[A-Za-z0-9_]+(,[A-Za-z0-9_]+)*$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class Problem(ValueError):
    """A value a variable's reader would misread or reject; the message says what is valid."""


class Variable(object):
    """One variable a component really reads.

    ``check(text)`` returns the text to write (normalised where the form is fixed, e.g. a YAML ``true`` for a 0/1
    flag becomes ``1``) or raises :class:`Problem`; ``values`` and ``meaning`` document it (docs/rocm.md);
    ``conf_file``: RCCL also reads it from /etc/rccl.conf (NCCL_* and RCCL_* names; others must be in the
    environment before the process starts). ``source``: where the name and its values are documented or read.
    """

    __slots__ = ("name", "component", "check", "values", "meaning", "flag", "source")

    def __init__(self, name: str, component: str, check: Callable[[str], str], values: str, meaning: str,
                 flag: bool = False, source: str = "") -> None:
        self.name = name
        self.component = component
        self.check = check
        self.values = values
        self.meaning = meaning
        self.flag = flag
        self.source = source

    @property
    def conf_file(self) -> bool:
        return in_conf_file(self.name)


# ------------------------------------------------------------------------------------------------ validators
def flag(component: str) -> Callable[[str], str]:
    def check(text: str) -> str:
        if text in ("0", "1"):
            return text
        why = ""
        if component in ("RCCL", "ROCr", "HIP") and not _INT.match(text):
            why = " (%s parses it as an integer: %r would be read as 0)" % (component, text)
        raise Problem("expected 0 or 1%s" % why)
    return check


def integer(low: Optional[int] = None, high: Optional[int] = None, unit: str = "") -> Callable[[str], str]:
    def check(text: str) -> str:
        if not _INT.match(text):
            lead = re.match(r"^-?[0-9]+", text)
            if lead and re.match(r"^-?0[0-9xX]", text):
                raise Problem("expected a decimal integer without leading zeros (RCCL reads numbers with strtoll "
                              "base 0: a leading 0 means octal, 0x hexadecimal)")
            if lead:
                raise Problem("expected a plain decimal integer%s: RCCL reads it with strtoll and stops at the "
                              "first non-digit, so %r would be read as %s%s"
                              % (" of " + unit if unit else "", text, lead.group(0), _unit_hint(unit, text)))
            raise Problem("expected a decimal integer%s" % (" of " + unit if unit else ""))
        number = int(text)
        if (low is not None and number < low) or (high is not None and number > high):
            raise Problem("out of range: valid values are %s to %s" % (
                low if low is not None else "-inf", high if high is not None else "inf"))
        return text
    return check


def _unit_hint(unit: str, text: str) -> str:
    match = re.match(r"^([0-9]+)\s*([KMG])i?B?$", text.strip(), re.IGNORECASE)
    if unit != "bytes" or not match:
        return ""
    factor = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[match.group(2).upper()]
    return "; write %d for %s %siB" % (int(match.group(1)) * factor, match.group(1), match.group(2).upper())


def choice(options: Tuple[str, ...], case_sensitive: bool, hints: Optional[Dict[str, str]] = None
           ) -> Callable[[str], str]:
    def check(text: str) -> str:
        if text in options or (not case_sensitive and text.upper() in (o.upper() for o in options)):
            return text
        if hints and text in hints:
            raise Problem(hints[text])
        same = [o for o in options if o.upper() == text.upper()]
        if same:
            raise Problem("write %r: the value is compared case-sensitively and %r would be ignored without a "
                          "word" % (same[0], text))
        raise Problem("choose one of %s%s" % ("|".join(options), "" if case_sensitive else " (any case)"))
    return check


def nccl_list(options: Tuple[str, ...], what: str, hints: Dict[str, str]) -> Callable[[str], str]:
    """NCCL_ALGO/NCCL_PROTO: a comma list, case-insensitive; a leading '^' excludes the listed ones instead."""
    upper = dict((o.upper(), o) for o in options)

    def check(text: str) -> str:
        body = text[1:] if text.startswith("^") else text
        items = body.split(",")
        bad = [item for item in items if item.upper() not in upper]  # no spaces: RCCL compares whole items
        if bad:
            hint = "; ".join(hints[b.upper()] for b in bad if b.upper() in hints)
            noun = (("an " if what[0] in "aeiou" else "a ") + what) if len(bad) == 1 else what + "s"
            raise Problem("%s %s not %s RCCL knows: use a comma list of %s (any case), or '^' first to exclude "
                          "the listed ones%s" % (", ".join(repr(b) for b in bad), "is" if len(bad) == 1 else "are",
                                                 noun, ", ".join(options), "; " + hint if hint else ""))
        if text.startswith("^") and set(i.upper() for i in items) >= set(upper):
            raise Problem("'^' excludes every %s, which leaves RCCL none to use" % what)
        return text
    return check


def interfaces(text: str) -> str:
    if not _IFACE_LIST.match(text):
        raise Problem("expected interface or HCA names (letters, digits, '_', '.', '-', optional ':port'), "
                      "comma-separated, with an optional '^' (exclude) or '=' (exact) prefix, e.g. 'ib0,ib1' or "
                      "'=mlx5_0:1,mlx5_1:1'")
    return text


def path(text: str) -> str:
    if not _PATH.match(text) or "/../" in text + "/" or "/./" in text + "/":
        raise Problem("expected an absolute, normalised file path (letters, digits and _ . % + @ : , - /)")
    return text


def plugin(text: str) -> str:
    if not _PLUGIN.match(text):
        raise Problem("expected a plugin name or library file name (letters, digits and _ . + -)")
    return text


def any_text(value: str) -> str:
    """Free text: only the checks every value gets (one printable line)."""
    return value


def subsystems(text: str) -> str:
    if not _WORD_LIST.match(text):
        raise Problem("expected a comma list of subsystems (%s), optionally '^' first to exclude them"
                      % ",".join(DEBUG_SUBSYSTEMS))
    return text


def gdr_level(text: str) -> str:
    if text in GDR_LEVELS:
        return text
    if _INT.match(text) and int(text) >= 0:
        old = GDR_OLD_NUMBERS[min(int(text), len(GDR_OLD_NUMBERS) - 1)]
        raise Problem("numeric levels are NCCL's deprecated old numbering (%s means %s there, and the numbering "
                      "changed between releases); write %s" % (text, old, old))
    if text == "NVL":
        raise Problem("NVL is NVIDIA's NVLink level; on RCCL the GPU-link level is XGMI")
    return choice(GDR_LEVELS, case_sensitive=True)(text)


ALLOC_CONF_KEYS = ("max_split_size_mb", "roundup_power2_divisions", "garbage_collection_threshold",
                   "expandable_segments")
_ALLOC_ITEM = re.compile(r"^([a-z_0-9]+):([A-Za-z0-9_.]+|\[[0-9:,_ ]+\])$")


def alloc_conf(text: str) -> str:
    """PYTORCH_HIP_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF: 'key:value,key:value' of the caching allocator's options
    (c10/cuda/CUDAAllocatorConfig.cpp parses it; an unknown key stops the process at its first allocation)."""
    items = re.split(r",(?![^\[]*\])", text)
    for item in items:
        match = _ALLOC_ITEM.match(item.strip())
        if not match or match.group(1) not in ALLOC_CONF_KEYS:
            raise Problem("expected comma-separated key:value options of PyTorch's caching allocator (%s), e.g. "
                          "'expandable_segments:True'; %r is not one" % (", ".join(ALLOC_CONF_KEYS), item))
    return text


ALGO_HINTS = {
    "AUTO": "to let RCCL choose, leave NCCL_ALGO unset (there is no 'auto' value)",
    "SHM": "SHM is a transport, not an algorithm (it is on unless NCCL_SHM_DISABLE=1)",
}
PROTO_HINTS = {"AUTO": "to let RCCL choose, leave NCCL_PROTO unset (there is no 'auto' value)"}

# ------------------------------------------------------------------------------------------------ the catalogue
_CATALOGUE = [
    # RCCL (NCCL_PARAM names; RCCL reads them from the environment, then ~/.rccl.conf and /etc/rccl.conf)
    Variable("NCCL_ALGO", "RCCL", nccl_list(ALGORITHMS, "algorithm", ALGO_HINTS),
             "comma list of %s (any case); '^' first excludes them" % ", ".join(ALGORITHMS),
             "algorithms RCCL may use; unset = RCCL chooses per collective and size"),
    Variable("NCCL_PROTO", "RCCL", nccl_list(PROTOCOLS, "protocol", PROTO_HINTS),
             "comma list of %s (any case); '^' first excludes them" % ", ".join(PROTOCOLS),
             "protocols RCCL may use; LL128 is used only on topologies RCCL knows unless "
             "RCCL_LL128_FORCE_ENABLE=1"),
    Variable("NCCL_BUFFSIZE", "RCCL", integer(1, None, "bytes"), "bytes, a plain decimal integer (4194304 = 4 MiB)",
             "buffer size for the data between each pair of GPUs; default 4194304 (4 MiB)"),
    Variable("NCCL_SOCKET_IFNAME", "RCCL", interfaces, "interface name prefixes, comma list; '^' excludes, '=' "
             "matches exactly", "IP interfaces for bootstrap and the socket transport (the interface needs an "
             "IP address)"),
    Variable("NCCL_IB_HCA", "RCCL", interfaces, "HCA name prefixes with optional ':port', comma list; '^' "
             "excludes, '=' matches exactly", "which InfiniBand/RoCE HCAs (and ports) RCCL uses"),
    Variable("NCCL_IB_GID_INDEX", "RCCL", integer(-1, 255), "-1 to 255", "GID index for RoCE (-1 = auto where "
             "supported)"),
    Variable("NCCL_IB_TIMEOUT", "RCCL", integer(1, 31), "1 to 31", "IB verbs timeout, 4.096 us x 2^value; raise "
             "it on very large fabrics"),
    Variable("NCCL_IB_RETRY_CNT", "RCCL", integer(0, 7), "0 to 7", "IB verbs retry count (default 7)"),
    Variable("NCCL_IB_SL", "RCCL", integer(0, 15), "0 to 15", "InfiniBand service level"),
    Variable("NCCL_IB_TC", "RCCL", integer(0, 255), "0 to 255", "InfiniBand/RoCE traffic class"),
    Variable("NCCL_IB_DISABLE", "RCCL", flag("RCCL"), "0 or 1", "1 = do not use InfiniBand/RoCE (sockets only)",
             flag=True),
    Variable("NCCL_NET_GDR_LEVEL", "RCCL", gdr_level, "|".join(GDR_LEVELS) + " (case-sensitive)",
             "the farthest NIC-to-GPU path at which GPU Direct RDMA is used"),
    Variable("NCCL_NET_PLUGIN", "RCCL", plugin, "plugin name or library file name",
             "which network plugin library RCCL loads"),
    Variable("NCCL_TOPO_FILE", "RCCL", path, "absolute path of an XML topology file",
             "topology RCCL loads instead of (or before) detecting it"),
    Variable("NCCL_TOPO_DUMP_FILE", "RCCL", path, "absolute path", "where RCCL writes the topology it detected"),
    Variable("NCCL_DEBUG", "RCCL", choice(DEBUG_LEVELS, case_sensitive=False), "|".join(DEBUG_LEVELS),
             "log level; WARN for production"),
    Variable("NCCL_DEBUG_SUBSYS", "RCCL", subsystems, "comma list of %s; '^' excludes" % ",".join(DEBUG_SUBSYSTEMS),
             "which subsystems log at INFO/TRACE"),
    Variable("NCCL_DEBUG_FILE", "RCCL", path, "absolute path; %h = host name, %p = process id",
             "write the log there instead of stdout"),
    Variable("NCCL_SOCKET_NTHREADS", "RCCL", integer(1, MAX_SOCKET_THREADS), "1 to %d" % MAX_SOCKET_THREADS,
             "helper threads per socket connection; threads x NCCL_NSOCKS_PERTHREAD <= %d" % MAX_SOCKETS),
    Variable("NCCL_NSOCKS_PERTHREAD", "RCCL", integer(1, MAX_SOCKETS), "1 to %d" % MAX_SOCKETS,
             "sockets per helper thread; NCCL_SOCKET_NTHREADS x sockets <= %d" % MAX_SOCKETS),
    Variable("NCCL_MIN_NCHANNELS", "RCCL", integer(1), "positive integer", "minimum number of channels (AMD's "
             "MI300X guide: 112)"),
    Variable("NCCL_MAX_NCHANNELS", "RCCL", integer(1), "positive integer", "maximum number of channels"),
    Variable("NCCL_CROSS_NIC", "RCCL", choice(("0", "1", "2"), case_sensitive=True), "0, 1 or 2",
             "0 = each ring/tree stays on one NIC, 1 = may cross NICs, 2 = default (try both)"),
    Variable("NCCL_IGNORE_CPU_AFFINITY", "RCCL", flag("RCCL"), "0 or 1",
             "1 = ignore the process's CPU affinity and use the GPU's NUMA node only", flag=True),
    Variable("NCCL_P2P_DISABLE", "RCCL", flag("RCCL"), "0 or 1", "1 = no direct GPU-to-GPU (xGMI/PCIe P2P) "
             "transport", flag=True),
    Variable("NCCL_SHM_DISABLE", "RCCL", flag("RCCL"), "0 or 1", "1 = no shared-memory transport", flag=True),
    Variable("NCCL_IB_QPS_PER_CONNECTION", "RCCL", integer(1, 128), "1 to 128",
             "queue pairs per connection between two ranks; more spread traffic over adaptive-routing fabrics "
             "(default 1)", source="NCCL docs (NCCL_IB_QPS_PER_CONNECTION, default 1); upper bound NCCL_IB_MAX_QPS "
             "128 in net_ib.cc (from memory of recent NCCL/RCCL sources)"),
    Variable("NCCL_IB_SPLIT_DATA_ON_QPS", "RCCL", flag("RCCL"), "0 or 1",
             "1 = split each message over all the connection's QPs, 0 = one QP per message", flag=True,
             source="NCCL docs (NCCL_IB_SPLIT_DATA_ON_QPS)"),
    Variable("NCCL_IB_PCI_RELAXED_ORDERING", "RCCL", choice(("0", "1", "2"), case_sensitive=True), "0, 1 or 2",
             "PCIe relaxed ordering for the IB verbs transport: 0 = off, 1 = on (fails where unsupported), 2 = "
             "where available (default)", source="NCCL docs (NCCL_IB_PCI_RELAXED_ORDERING, since NCCL 2.12)"),
    Variable("NCCL_IB_ADAPTIVE_ROUTING", "RCCL", flag("RCCL"), "0 or 1",
             "1 = use the fabric's adaptive routing for IB traffic", flag=True,
             source="NCCL docs (NCCL_IB_ADAPTIVE_ROUTING, since NCCL 2.16)"),
    Variable("NCCL_NCHANNELS_PER_NET_PEER", "RCCL", integer(1), "positive integer",
             "channels used towards each remote peer over the network", source="NCCL docs "
             "(NCCL_NCHANNELS_PER_NET_PEER)"),
    Variable("NCCL_MIN_P2P_NCHANNELS", "RCCL", integer(1), "positive integer",
             "minimum channels for point-to-point operations", source="NCCL docs (NCCL_MIN_P2P_NCHANNELS)"),
    Variable("NCCL_MAX_P2P_NCHANNELS", "RCCL", integer(1), "positive integer",
             "maximum channels for point-to-point operations", source="NCCL docs (NCCL_MAX_P2P_NCHANNELS)"),
    Variable("NCCL_NET_GDR_READ", "RCCL", flag("RCCL"), "0 or 1",
             "1 = send data with GPU Direct RDMA reads from GPU memory too", flag=True,
             source="NCCL docs (NCCL_NET_GDR_READ)"),
    Variable("NCCL_P2P_LEVEL", "RCCL", gdr_level, "|".join(GDR_LEVELS) + " (case-sensitive)",
             "the farthest GPU-to-GPU path at which the P2P transport is used", source="NCCL docs (NCCL_P2P_LEVEL, "
             "same levels as NCCL_NET_GDR_LEVEL; XGMI is RCCL's name for the GPU link level)"),
    Variable("NCCL_SOCKET_FAMILY", "RCCL", choice(("AF_INET", "AF_INET6"), case_sensitive=True),
             "AF_INET or AF_INET6", "address family for bootstrap and sockets", source="NCCL docs "
             "(NCCL_SOCKET_FAMILY)"),
    Variable("NCCL_IB_ADDR_FAMILY", "RCCL", choice(("AF_INET", "AF_INET6"), case_sensitive=True),
             "AF_INET or AF_INET6", "address family of the RoCE GID to use", source="NCCL docs "
             "(NCCL_IB_ADDR_FAMILY)"),
    # issue 24.4: real names that were refused (each read in the RCCL source cited at RCCL_PARAMS / RCCL_TEXT)
    Variable("NCCL_NET", "RCCL", plugin, "IB, Socket or the name of a loaded network plugin",
             "which network RCCL uses (case-insensitive name match); unset = the first that works",
             source="ROCm/rccl src/init.cc envConfigOverride(): ncclGetEnv(\"NCCL_NET\")"),
    Variable("NCCL_PXN_DISABLE", "RCCL", flag("RCCL"), "0 or 1",
             "1 = no PXN (sending through another GPU's NIC); RCCL's default is 1", flag=True,
             source="ROCm/rccl src/graph/paths.cc NCCL_PARAM(PxnDisable, \"PXN_DISABLE\", 1)"),
    Variable("NCCL_P2P_NET_CHUNKSIZE", "RCCL", integer(1, None, "bytes"), "bytes, a plain decimal integer",
             "chunk size of point-to-point transfers over the network (default 131072)",
             source="ROCm/rccl src/init.cc NCCL_PARAM(P2pNetChunkSize, \"P2P_NET_CHUNKSIZE\", 1 << 17)"),
    Variable("NCCL_DMABUF_ENABLE", "RCCL", flag("RCCL"), "0 or 1",
             "1 = register GPU memory with the NIC through DMA-BUF (needs kernel CONFIG_DMABUF_MOVE_NOTIFY and "
             "CONFIG_PCI_P2PDMA); RCCL's default is 0", flag=True,
             source="ROCm/rccl src/misc/rocmwrap.cc NCCL_PARAM(DmaBufEnable, \"DMABUF_ENABLE\", 0)"),
    Variable("NCCL_IB_USE_INLINE", "RCCL", flag("RCCL"), "0 or 1", "1 = send small IB messages inline",
             flag=True, source="ROCm/rccl src/transport/net_ib.cc NCCL_PARAM(IbUseInline, \"IB_USE_INLINE\", 0)"),
    Variable("NCCL_IB_MERGE_NICS", "RCCL", flag("RCCL"), "0 or 1",
             "1 = merge the ports of a dual-port NIC into one device (default), 0 = use them separately", flag=True,
             source="ROCm/rccl src/transport/net_ib.cc NCCL_PARAM(IbMergeNics, \"IB_MERGE_NICS\", 1)"),
    Variable("NCCL_GRAPH_FILE", "RCCL", path, "absolute path of an XML graph file",
             "rings/trees RCCL loads instead of searching for them",
             source="NCCL/RCCL src/graph/search.cc ncclGetEnv(\"NCCL_GRAPH_FILE\") (found by text search)"),
    Variable("NCCL_HOSTID", "RCCL", any_text, "any text",
             "host identity RCCL hashes instead of host name + boot id (containers sharing one host)",
             source="ROCm/rccl src/misc/utils.cc getHostHashOnce(): ncclGetEnv(\"NCCL_HOSTID\")"),
    Variable("NCCL_NCHANNELS_PER_PEER", "RCCL", integer(1), "positive integer",
             "channels per peer for point-to-point operations within the node",
             source="ROCm/rccl src/graph/paths.cc NCCL_PARAM(NChannelsPerPeer, \"NCHANNELS_PER_PEER\", -2)"),
    Variable("NCCL_COLLNET_ENABLE", "RCCL", flag("RCCL"), "0 or 1",
             "1 = use CollNet (in-network reduction, e.g. SHARP) where a plugin offers it", flag=True,
             source="ROCm/rccl src/init.cc initTransportsRank(): ncclGetEnv(\"NCCL_COLLNET_ENABLE\"), compared "
             "with \"1\""),
    Variable("NCCL_LAUNCH_MODE", "RCCL", choice(("PARALLEL", "GROUP"), case_sensitive=False), "PARALLEL|GROUP",
             "how the ranks of one process launch their kernels (default PARALLEL)",
             source="ROCm/rccl src/init.cc initTransportsRank(): ncclGetEnv(\"NCCL_LAUNCH_MODE\")"),
    Variable("NCCL_CONF_FILE", "RCCL", path, "absolute path",
             "a KEY=VALUE file RCCL reads instead of ~/.rccl.conf (/etc/rccl.conf is still read); RCCL takes it "
             "from the environment only", source="ROCm/rccl src/misc/param.cc initEnvFunc(): getenv("
             "\"NCCL_CONF_FILE\")"),
    Variable("RCCL_MSCCLPP_ENABLE", "RCCL", flag("RCCL"), "0 or 1",
             "1 = MSCCL++ for the collectives it supports (RCCL built with ENABLE_MSCCLPP; gfx942/gfx950)",
             flag=True, source="ROCm/rccl src/init.cc RCCL_PARAM(MscclppEnabled, \"MSCCLPP_ENABLE\", 0)"),
    Variable("RCCL_LOG_LEVEL", "RCCL", integer(0), "non-negative integer (default 1)",
             "RCCL logging verbosity; higher is more detailed",
             source="ROCm/rccl docs/api-reference/env-variables.rst (not found in the source files read)"),
    Variable("RCCL_LL128_FORCE_ENABLE", "RCCL", flag("RCCL"), "0 or 1", "1 = use LL128 also on topologies that "
             "are not on RCCL's list (measure first)", flag=True),
    Variable("RCCL_MSCCL_ENABLE", "RCCL", flag("RCCL"), "0 or 1", "MSCCL algorithms on/off (removed in the "
             "newest RCCL)", flag=True),
    # ROCr (HSA runtime) and HIP: read when the runtime starts, so only from the environment
    Variable("HSA_FORCE_FINE_GRAIN_PCIE", "ROCr", flag("ROCr"), "0 or 1", "1 = fine-grained host memory over "
             "PCIe (needed by some RCCL/PCIe setups)", flag=True),
    Variable("HSA_OVERRIDE_CPU_AFFINITY_DEBUG", "ROCr", flag("ROCr"), "0 or 1", "0 = ROCr's helper threads keep "
             "the process's CPU affinity (what nodetune-bind sets); default 1 = they run on every CPU", flag=True),
    Variable("HSA_ENABLE_SDMA", "ROCr", flag("ROCr"), "0 or 1", "0 = copies by shader kernels instead of the "
             "SDMA engines", flag=True),
    Variable("HSA_NO_SCRATCH_RECLAIM", "ROCr", flag("ROCr"), "0 or 1", "1 = keep scratch memory allocated "
             "between kernels", flag=True),
    Variable("HIP_FORCE_DEV_KERNARG", "HIP", flag("HIP"), "0 or 1", "1 = kernel arguments in device memory "
             "(AMD's MI300X guide)", flag=True),
    Variable("GPU_MAX_HW_QUEUES", "HIP", integer(1, 1024), "positive integer",
             "hardware queues HIP allocates per device (default 4); more lets more streams run concurrently",
             source="HIP runtime flag GPU_MAX_HW_QUEUES (ROCclr utils/flags.hpp: 'The maximum number of HW queues "
             "allocated per device', default 4); AMD's MI300X workload optimization guide"),
    Variable("HIP_LAUNCH_BLOCKING", "HIP", flag("HIP"), "0 or 1", "1 = every kernel launch waits (debugging "
             "only: serialises the GPU)", flag=True, source="HIP runtime flags (ROCclr utils/flags.hpp)"),
    Variable("AMD_LOG_LEVEL", "HIP", integer(0, 4), "0 to 4", "HIP runtime log level: 0 = off, 1 = errors, "
             "2 = warnings, 3 = info, 4 = debug", source="HIP runtime flags (ROCclr utils/flags.hpp) and the HIP "
             "debugging documentation"),
    Variable("HSA_ENABLE_INTERRUPT", "ROCr", flag("ROCr"), "0 or 1", "0 = ROCr polls for completion signals "
             "instead of waiting for interrupts (busy CPU)", flag=True, source="ROCr runtime flags "
             "(rocr-runtime core/util/flag.h)"),
    Variable("HSA_XNACK", "ROCr", flag("ROCr"), "0 or 1", "1 = page-fault retry (XNACK) on GPUs that support it, "
             "needed for unified memory migration", flag=True, source="ROCm documentation (HSA_XNACK); ROCr "
             "runtime flags"),
    # OpenMP (node-wide default only: nodetune-bind sets each rank's own value)
    Variable("OMP_NUM_THREADS", "OpenMP", integer(1), "positive integer", "OpenMP threads per process; "
             "nodetune-bind sets each rank's own value from the Layout"),
    # PyTorch (ProcessGroupNCCL reads them when a process group is created)
    Variable("TORCH_NCCL_ASYNC_ERROR_HANDLING", "PyTorch", choice(("0", "1", "2", "3"), case_sensitive=True),
             "0 to 3", "what a failed or timed-out collective does: 0 = nothing, 1 = tear down the process, "
             "2 = clean up only, 3 = tear down without cleanup"),
    Variable("TORCH_NCCL_BLOCKING_WAIT", "PyTorch", flag("PyTorch"), "0 or 1", "1 = wait() blocks and raises "
             "on timeout", flag=True),
    Variable("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "PyTorch", integer(1, None, "seconds"), "seconds",
             "watchdog heartbeat timeout"),
    Variable("TORCH_NCCL_DUMP_ON_TIMEOUT", "PyTorch", flag("PyTorch"), "0 or 1", "1 = dump the flight recorder "
             "on a timeout", flag=True),
    Variable("TORCH_NCCL_TRACE_BUFFER_SIZE", "PyTorch", integer(0), "entries, 0 = off",
             "flight recorder size (needed by TORCH_NCCL_DUMP_ON_TIMEOUT)"),
    Variable("TORCH_NCCL_HIGH_PRIORITY", "PyTorch", flag("PyTorch"), "0 or 1",
             "1 = ProcessGroupNCCL runs its collectives on high-priority streams", flag=True,
             source="PyTorch ProcessGroupNCCL (TORCH_NCCL_HIGH_PRIORITY, torch/csrc/distributed/c10d/"
             "ProcessGroupNCCL.hpp); AMD's MI300X workload optimization guide"),
    Variable("TORCH_NCCL_AVOID_RECORD_STREAMS", "PyTorch", flag("PyTorch"), "0 or 1",
             "1 = ProcessGroupNCCL keeps tensors alive itself instead of recordStream (less allocator "
             "fragmentation)", flag=True, source="PyTorch ProcessGroupNCCL (TORCH_NCCL_AVOID_RECORD_STREAMS)"),
    Variable("TORCH_NCCL_ENABLE_MONITORING", "PyTorch", flag("PyTorch"), "0 or 1",
             "1 = the heartbeat monitor thread kills a hung process after TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC",
             flag=True, source="PyTorch ProcessGroupNCCL (TORCH_NCCL_ENABLE_MONITORING)"),
    Variable("TORCH_NCCL_DESYNC_DEBUG", "PyTorch", flag("PyTorch"), "0 or 1",
             "1 = on a timeout, report which rank is out of step (debugging)", flag=True,
             source="PyTorch ProcessGroupNCCL (TORCH_NCCL_DESYNC_DEBUG)"),
    Variable("PYTORCH_HIP_ALLOC_CONF", "PyTorch", alloc_conf, "key:value list of %s" % ", ".join(ALLOC_CONF_KEYS),
             "options of PyTorch's GPU caching allocator on ROCm, e.g. expandable_segments:True",
             source="PyTorch CUDA semantics docs (PYTORCH_CUDA_ALLOC_CONF; on ROCm builds PYTORCH_HIP_ALLOC_CONF, "
             "parsed by c10/cuda/CUDAAllocatorConfig.cpp)"),
    Variable("PYTORCH_TUNABLEOP_ENABLED", "PyTorch", flag("PyTorch"), "0 or 1",
             "1 = TunableOp picks the fastest GEMM implementation (AMD's MI300X guide)", flag=True,
             source="PyTorch TunableOp README (aten/src/ATen/cuda/tunable); AMD's MI300X workload optimization "
             "guide"),
    Variable("TORCH_BLAS_PREFER_HIPBLASLT", "PyTorch", flag("PyTorch"), "0 or 1",
             "1 = hipBLASLt for GEMMs where supported, 0 = hipBLAS/rocBLAS", flag=True,
             source="PyTorch ROCm backend (TORCH_BLAS_PREFER_HIPBLASLT, aten/src/ATen/Context.cpp)"),
]
VARIABLES = dict((v.name, v) for v in _CATALOGUE)

# ------------------------------------------------------------------------------------------------ RCCL's own names
# Every NCCL_*/RCCL_* name RCCL reads, as its source declares it, so that a real name is never refused because the
# curated table above has no row for it. Repository ROCm/rccl, each file at the commit given (the stored copy of
# each file is the one of its own last change, so there is no single commit for all). NCCL_PARAM(Name, "SUFFIX", d)
# reads NCCL_<SUFFIX> and RCCL_PARAM reads RCCL_<SUFFIX>, both as integers (strtoll, base 0: "4M" is 4); the
# ncclGetEnv()/getenv() names are read as text. Only the files listed were read (src/transport/net_ib.cc: its
# first 16000 characters, where the IB parameters are declared); nothing here says since which release a name
# exists: the files were read at one commit each.
RCCL_PARAMS = {
    "src/init.cc@7383f10d9031167141137837c9f1b4dc7ea82e64": (
        "NCCL_GROUP_CUDA_STREAM", "NCCL_CHECK_POINTERS", "NCCL_COMM_BLOCKING", "NCCL_RUNTIME_CONNECT",
        "NCCL_GDRCOPY_ENABLE", "NCCL_AGG_CHANNEL_SIZE", "NCCL_GRAPH_HELPER_DISABLE", "NCCL_GDRCOPY_FIFO_ENABLE",
        "NCCL_WORK_FIFO_BYTES", "NCCL_WORK_ARGS_BYTES", "NCCL_MNNVL_UUID", "NCCL_MNNVL_CLIQUE_ID", "NCCL_BUFFSIZE",
        "NCCL_LL_BUFFSIZE", "NCCL_LL128_BUFFSIZE", "NCCL_P2P_NET_CHUNKSIZE", "NCCL_P2P_PCI_CHUNKSIZE",
        "NCCL_P2P_NVL_CHUNKSIZE", "NCCL_GRAPH_DUMP_FILE_RANK", "NCCL_COLLNET_NODE_THRESHOLD", "NCCL_NVB_PRECONNECT",
        "NCCL_ALLOC_P2P_NET_LL_BUFFERS", "NCCL_MNNVL_ENABLE", "NCCL_SET_STACK_SIZE", "NCCL_CGA_CLUSTER_SIZE",
        "NCCL_MAX_CTAS", "NCCL_MIN_CTAS", "NCCL_COMM_SPLIT_SHARE_RESOURCES",
        "RCCL_MSCCLPP_THRESHOLD", "RCCL_MSCCLPP_ENABLE", "RCCL_MSCCLPP_FORCE_ENABLE", "RCCL_GFX942_CHEAP_FENCE_OFF",
        "RCCL_ENABLE_PROXY_TRACE", "RCCL_KERNEL_COLL_TRACE_ENABLE", "RCCL_KERNEL_COLL_TRACE_THREAD_ENABLE",
        "RCCL_P2P_NET_DISABLE", "RCCL_PIVOT_ALLTOALL_ENABLE", "RCCL_LL128_FORCE_ENABLE", "RCCL_INJECT_FAULTS",
        "RCCL_STACK_SIZE_OVERRIDE"),
    "src/debug.cc@02a066c0707362771e08e51e8b5d5f00ee67ff47": ("NCCL_SET_THREAD_NAME",),
    "src/misc/rocmwrap.cc@cdd66a41300bb6eff59ae81bad7589d6f592e60f": ("NCCL_DMABUF_ENABLE",),
    "src/plugin/net.cc@0123763ff393130691e37d741def03d2eb3e35ec": ("NCCL_NET_PLUGIN_REF_COUNT",),
    "src/graph/paths.cc@ee2d4e4205760aab66da0dc941993b7b2d3fa29b": (
        "NCCL_NVB_DISABLE", "NCCL_IGNORE_DISABLED_P2P", "NCCL_NET_GDR_READ", "NCCL_NET_GDR_C2C",
        "NCCL_NET_FORCE_FLUSH", "NCCL_NET_DISABLE_INTRA", "NCCL_PXN_DISABLE", "RCCL_ENABLE_INTRANET",
        "NCCL_NCHANNELS_PER_NET_PEER", "NCCL_NCHANNELS_PER_PEER", "NCCL_MIN_P2P_NCHANNELS",
        "NCCL_MAX_P2P_NCHANNELS"),
    "src/transport/net_ib.cc@29e8452adea8a3c54106479446460caeaffdd20a": (
        "NCCL_IB_GID_INDEX", "NCCL_IB_ROUTABLE_FLID_GID_INDEX", "NCCL_IB_ROCE_VERSION_NUM", "NCCL_IB_TIMEOUT",
        "NCCL_IB_RETRY_CNT", "NCCL_IB_PKEY", "NCCL_IB_USE_INLINE", "NCCL_IB_SL", "NCCL_IB_TC", "NCCL_IB_AR_THRESHOLD",
        "NCCL_IB_PCI_RELAXED_ORDERING", "NCCL_IB_ADAPTIVE_ROUTING", "NCCL_IB_FIFO_TC", "NCCL_IB_RETURN_ASYNC_EVENTS",
        "NCCL_IB_ECE_ENABLE", "NCCL_IB_DISABLE", "NCCL_IB_MERGE_VFS", "NCCL_IB_MERGE_NICS"),
}
RCCL_TEXT = {
    "src/init.cc@7383f10d9031167141137837c9f1b4dc7ea82e64": (
        "NCCL_TOPO_DUMP_FILE", "NCCL_COLLNET_ENABLE", "NCCL_LAUNCH_MODE", "NCCL_NET", "NCCL_COMM_ID"),
    "src/debug.cc@02a066c0707362771e08e51e8b5d5f00ee67ff47": (
        "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_WARN_ENABLE_DEBUG_INFO", "NCCL_DEBUG_TIMESTAMP_LEVELS",
        "NCCL_DEBUG_TIMESTAMP_FORMAT", "NCCL_DEBUG_FILE"),
    "src/misc/param.cc@fde532595a97110d8b2fd78dabc6afd3a72b685f": ("NCCL_CONF_FILE",),
    "src/misc/rocmwrap.cc@cdd66a41300bb6eff59ae81bad7589d6f592e60f": ("RCCL_ROCR_PATH",),
    "src/misc/utils.cc@2a59f8dddd0027be4c12f5a198f9bded30afd639": ("NCCL_HOSTID",),
    "src/plugin/net.cc@0123763ff393130691e37d741def03d2eb3e35ec": ("NCCL_NET_PLUGIN",),
    "src/graph/paths.cc@ee2d4e4205760aab66da0dc941993b7b2d3fa29b": (
        "NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_NET_GDR_LEVEL"),
    "src/transport/net_ib.cc@29e8452adea8a3c54106479446460caeaffdd20a": ("NCCL_IB_ADDR_FAMILY", "NCCL_IB_ADDR_RANGE"),
    # RCCL's own reference page, not source: documented names the files above do not declare
    "docs/api-reference/env-variables.rst@0e49824e68983d37660c322893a09aebd4c45b3e": (
        "RCCL_LOG_LEVEL", "NCCL_NET_MERGE_LEVEL", "NCCL_NET_FORCE_MERGE", "NCCL_RINGS", "RCCL_TREES",
        "NCCL_RINGS_REMAP"),
}
RCCL_INTEGER_NAMES = frozenset(name for names in RCCL_PARAMS.values() for name in names)
RCCL_NAMES = RCCL_INTEGER_NAMES | frozenset(name for names in RCCL_TEXT.values() for name in names)
# Read before /etc/rccl.conf is: it only works in the environment
ENVIRONMENT_ONLY = ("NCCL_CONF_FILE",)


def is_known(name: str) -> bool:
    """A name some component really reads: in the curated table or declared in RCCL's source."""
    return name in VARIABLES or name in RCCL_NAMES


def in_conf_file(name: str) -> bool:
    """Whether RCCL also takes ``name`` from /etc/rccl.conf (its own names, read after the file is loaded)."""
    return name.startswith(("NCCL_", "RCCL_")) and name not in ENVIRONMENT_ONLY


# ------------------------------------------------------------------------------------------------ wrong names
TIMEOUT_IN_CODE = ("the collective timeout is set in code: init_process_group(timeout=timedelta(...)); "
                   "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC and TORCH_NCCL_ASYNC_ERROR_HANDLING are the related variables")
# name from the articles -> the real name, or None ("has no effect")
WRONG_NAMES = {
    "RCCL_PROTO": "NCCL_PROTO",
    "RCCL_ALGO": "NCCL_ALGO",
    "RCCL_TOPO_FILE": "NCCL_TOPO_FILE",
    "RCCL_NET_PLUGIN": "NCCL_NET_PLUGIN",
    "RCCL_SOCKET_IFNAME": "NCCL_SOCKET_IFNAME",
    "RCCL_BUFFSIZE": "NCCL_BUFFSIZE",
    "RCCL_NSOCKS_PERTHREAD": "NCCL_NSOCKS_PERTHREAD",
    "RCCL_TOPO_DUMP_FILE": "NCCL_TOPO_DUMP_FILE",
    "RCCL_NET_GDR_LEVEL": "NCCL_NET_GDR_LEVEL",
    "RCCL_DEBUG": "NCCL_DEBUG",
    "RCCL_DEBUG_SUBSYS": "NCCL_DEBUG_SUBSYS",
    "RCCL_TIMEOUT": None,
    "NCCL_TIMEOUT": None,
    "HSA_AMD_ENABLE_ASYNC_IO": None,
    "HSA_AMD_ENABLE_UM_PRE_REGISTER": None,
    "HSA_AMD_SEVM_PRE_ALLOC": None,
    "AMD_ZSTD_ACCELERATION": None,
    "AMD_LZ4_ACCELERATION": None,
    "ZSTD_NBTHREADS": None,
    "HCCL_OVER_OFI": None,
}
NO_EFFECT_WHY = {
    "RCCL_TIMEOUT": TIMEOUT_IN_CODE,
    "NCCL_TIMEOUT": TIMEOUT_IN_CODE,
    "HSA_AMD_ENABLE_ASYNC_IO": "ROCr has no such switch; checkpoint I/O is the training framework's job",
    "HSA_AMD_ENABLE_UM_PRE_REGISTER": "ROCr has no such switch",
    "HSA_AMD_SEVM_PRE_ALLOC": "ROCr has no such switch",
    "AMD_ZSTD_ACCELERATION": "no AMD library reads it; compression runs wherever your code runs it",
    "AMD_LZ4_ACCELERATION": "no AMD library reads it; compression runs wherever your code runs it",
    "ZSTD_NBTHREADS": "only the zstd command-line tool reads it, not ROCm, RCCL or PyTorch",
    "HCCL_OVER_OFI": "it belongs to Habana Gaudi's HCCL, not ROCm",
}
# Correct names that must not be set node-wide: each rank needs its own value
PER_RANK = {
    "GOMP_CPU_AFFINITY": "it pins: one node-wide value would put every rank on the same CPUs, and libgomp binds a "
                         "process's first thread to the list's first CPU; nodetune-bind sets each rank's CPU set "
                         "as its process affinity (and removes GOMP_CPU_AFFINITY)",
}


def wrong_name_message(name: str) -> Optional[str]:
    """Why ``name`` does not do what the articles claim (None for names that are fine)."""
    if name in WRONG_NAMES:
        real = WRONG_NAMES[name]
        if real:
            return "%s is read by nothing (RCCL reads NCCL_* names); use %s" % (name, real)
        return "%s has no effect: no ROCm, RCCL or PyTorch component reads it%s" % (
            name, ("; " + NO_EFFECT_WHY[name]) if name in NO_EFFECT_WHY else "")
    if name in PER_RANK:
        return "%s should not be set node-wide: %s" % (name, PER_RANK[name])
    return None


def unknown_name_message(name: str) -> str:
    near = _close_names(name)
    return ("%s is not in nodetune's catalogue of variables that RCCL, ROCr, HIP and PyTorch read (docs/rocm.md)%s. "
            "If a component you use really reads it, set nodetune_rocm_env_policy: warn"
            % (name, " - did you mean %s?" % " or ".join(near) if near else ""))


def _close_names(name: str) -> List[str]:
    import difflib  # only on this error path

    # the curated names first: a typo of NCCL_BUFFSIZE should not also suggest NCCL_LL_BUFFSIZE
    return (difflib.get_close_matches(name, sorted(VARIABLES), n=2, cutoff=0.8)
            or difflib.get_close_matches(name, sorted(RCCL_NAMES), n=2, cutoff=0.8))


# ------------------------------------------------------------------------------------------------ values
def as_text(value: object, variable: Optional[Variable]) -> str:
    """The text a YAML value stands for. Booleans: 1/0 for a 0/1 flag; refused for other catalogued variables
    (``NCCL_ALGO: yes`` is a mistake, not a value)."""
    if isinstance(value, bool):
        if variable is None:
            return "1" if value else "0"
        if variable.flag:
            return "1" if value else "0"
        raise Problem("a YAML boolean is not valid here: expected %s" % variable.values)
    if isinstance(value, float):
        if variable is not None:
            raise Problem("a decimal number is not valid here: expected %s" % variable.values)
        return repr(value)
    if isinstance(value, (dict, list, tuple)) or value is None:
        raise Problem("expected a single value")
    return str(value)


def check_text(text: str) -> None:
    """What every value must be, whoever reads it: one line of printable text (files hold one per line)."""
    if _CONTROL.search(text):
        raise Problem("contains a newline or another control character; values are single lines")
    if len(text) > 1000:
        raise Problem("is longer than 1000 characters (RCCL reads at most 1023 from /etc/rccl.conf)")


def check_value(name: str, value: object) -> str:
    """The text to write for ``name``; raises :class:`Problem` naming what is valid.

    Names outside the catalogue only get the checks every value gets (one printable line)."""
    variable = VARIABLES.get(name)
    text = as_text(value, variable)
    check_text(text)
    if variable is not None:
        return variable.check(text)
    if name in RCCL_INTEGER_NAMES:  # NCCL_PARAM/RCCL_PARAM: RCCL reads it with strtoll
        return integer()(text)
    return text


def value_hint(name: str, text: str) -> Optional[str]:
    """For a wrong name: what is also wrong with its value under the real name (RCCL_BUFFSIZE=4M), else None."""
    real = WRONG_NAMES.get(name)
    if not real:
        return None
    try:
        VARIABLES[real].check(text)
    except Problem as problem:
        return "%s=%s is not valid either: %s" % (real, text, problem)
    return None


def combination_problems(env: Dict[str, str]) -> Tuple[List[str], List[str]]:
    """Rules across variables: (errors, warnings). ``env`` holds the final, checked texts."""
    errors: List[str] = []
    warnings: List[str] = []
    threads = _int_or(env.get("NCCL_SOCKET_NTHREADS")) or 1
    socks = _int_or(env.get("NCCL_NSOCKS_PERTHREAD")) or 1
    if threads * socks > MAX_SOCKETS:
        errors.append("NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD = %d x %d = %d: RCCL allows at most %d sockets "
                      "per connection (lower one of them)" % (threads, socks, threads * socks, MAX_SOCKETS))
    low, high = _int_or(env.get("NCCL_MIN_NCHANNELS")), _int_or(env.get("NCCL_MAX_NCHANNELS"))
    if low is not None and high is not None and low > high:
        errors.append("NCCL_MIN_NCHANNELS=%d is above NCCL_MAX_NCHANNELS=%d" % (low, high))
    if uses_ll128(env.get("NCCL_PROTO")) and "RCCL_LL128_FORCE_ENABLE" not in env:
        warnings.append("NCCL_PROTO=%s asks for LL128, which RCCL uses only on topologies on its list; elsewhere it "
                        "falls back to another protocol without a word unless RCCL_LL128_FORCE_ENABLE=1 is set. "
                        "nodetune does not set RCCL_LL128_FORCE_ENABLE for you: add it to nodetune_rocm_env "
                        "(1, or 0 to silence this note) once you have measured it on your topology"
                        % env["NCCL_PROTO"])
    if "RCCL_MSCCL_ENABLE" in env:
        warnings.append("RCCL_MSCCL_ENABLE is read by older RCCL releases only (MSCCL was removed from the newest "
                        "RCCL); it has no effect there")
    return errors, warnings


def uses_ll128(proto: Optional[str]) -> bool:
    if not proto:
        return False
    body = proto[1:] if proto.startswith("^") else proto
    listed = "LL128" in set(i.upper() for i in body.split(","))
    return listed != proto.startswith("^")


def _int_or(text: Optional[str]) -> Optional[int]:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


# ------------------------------------------------------------------------------------------------ profiles
# The articles' parameter matrix (seed 1) and seed 3's multi-node stability settings, with the names RCCL reads.
class Profile(object):
    __slots__ = ("name", "env", "scenario", "source")

    def __init__(self, name: str, env: Dict[str, str], scenario: str, source: str) -> None:
        self.name = name
        self.env = env
        self.scenario = scenario
        self.source = source


PROFILES = dict((p.name, p) for p in (
    Profile("none", {}, "nothing set node-wide (RCCL's own choices)", "-"),
    Profile("single_node_small", {"NCCL_PROTO": "LL", "NCCL_BUFFSIZE": "1048576"},
            "single node, small model (< 1B parameters); algorithm left to RCCL", "seed 1 matrix"),
    Profile("single_node_large", {"NCCL_PROTO": "LL128", "NCCL_ALGO": "Tree", "NCCL_BUFFSIZE": "4194304"},
            "single node, large model (1-10B parameters)", "seed 1 matrix"),
    Profile("multi_node", {"NCCL_PROTO": "LL128", "NCCL_ALGO": "Ring", "NCCL_BUFFSIZE": "8388608"},
            "multi node, > 10B parameters", "seed 1 matrix"),
    Profile("mixed_precision", {"NCCL_PROTO": "Simple", "NCCL_ALGO": "Ring", "NCCL_BUFFSIZE": "2097152"},
            "mixed precision FP16/FP8", "seed 1 matrix"),
    Profile("multi_node_stable", {"NCCL_ALGO": "Ring", "NCCL_BUFFSIZE": "8388608", "NCCL_DEBUG": "WARN"},
            "multi node, stability first: Ring across nodes, 8 MiB buffers, warnings only", "seed 3"),
))


__all__ = ["VARIABLES", "RCCL_NAMES", "RCCL_PARAMS", "RCCL_TEXT", "is_known", "in_conf_file",
           "WRONG_NAMES", "NO_EFFECT_WHY", "PER_RANK", "PROFILES", "Problem", "Variable",
           "check_value", "value_hint", "combination_problems", "wrong_name_message", "unknown_name_message",
           "uses_ll128"]
