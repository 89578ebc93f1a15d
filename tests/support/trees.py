"""Comparing a node tree with itself before nodetune touched it."""

from __future__ import annotations

# The kernel's choice, not a value nodetune writes or restores: a reverted IRQ stays on the CPU it was pinned to
# while the restored mask holds it (arch/x86/kernel/apic/vector.c, assign_vector_locked(); modelled by the lab's
# simkernel, tests/unit/test_simkernel.py). Restoring smp_affinity is what revert promises.
KERNEL_CHOSEN = ("/effective_affinity", "/effective_affinity_list")


def changed_paths(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))


def reverted_differences(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """The paths a revert left different from ``before`` (tree digests), the kernel-chosen ones excepted."""
    return [p for p in changed_paths(before, after) if not p.endswith(KERNEL_CHOSEN)]
