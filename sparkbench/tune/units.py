"""The units a tune's trials are dealt to: peers only. A trial's figure is ranked against the
others' as if all were measured on one unit, so a tune over several units (``-l`` naming more than
one) takes units of one hardware profile, the key by which ``health.yml`` groups peers
(``sparkbench.health.peer_key``: hardware profile, model, variant; the model and variant are the
space's base on every unit)."""

from __future__ import annotations

from collections.abc import Mapping


def peer_problem(profiles: Mapping[str, str | None]) -> str | None:
    """Why the units (unit → its hardware profile name) cannot share a tune; None when they are peers."""
    groups: dict[str, list[str]] = {}
    for unit, profile in profiles.items():
        groups.setdefault(str(profile or "no hardware profile"), []).append(unit)
    if len(groups) < 2:
        return None
    said = "; ".join(f"{', '.join(units)}: {profile}" for profile, units in sorted(groups.items()))
    return (f"the units are not peers ({said}): a tune deals its trials to units of one hardware profile "
            "(bench_hardware_profile_name); run one tune per profile with -l naming its units")
