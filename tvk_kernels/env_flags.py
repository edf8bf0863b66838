"""On/off environment settings (TVK_BENCHMARK, TVK_VALIDATION, ...): one parser for all of them.

Only clear values are taken, in any case: 1, true, yes, on / 0, false, no, off; empty or unset
means the setting's default. Anything else (TVK_BENCHMARK=maybe, =2) is refused with an error
naming the variable, rather than guessed to be on or off.
"""
from __future__ import annotations

import os

ON = ("1", "true", "yes", "on")
OFF = ("0", "false", "no", "off")


def env_flag(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name, "")
    value = raw.strip().lower()
    if value == "":
        return default
    if value in ON:
        return True
    if value in OFF:
        return False
    raise ValueError(f"{name}={raw!r} is not an on/off setting: use one of {', '.join(ON)} (on) or "
                     f"{', '.join(OFF)} (off), in any case, or leave it unset for the default "
                     f"({'on' if default else 'off'})")
