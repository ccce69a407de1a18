"""`--help`'s config groups: the groups a user picks one option of (agent=, env=, ...), and apart from them the
preset folders that rlexp applies through a key (fallback=auto|none, +sweep=<name>), which are no group=option."""
from __future__ import annotations

from typing import Callable

# preset folder -> (how the command line uses it, what it holds)
KEY_GROUPS = {"fallbacks": ("fallback=auto|none", "applied to an agent+env pair without a tuned preset"),
              "sweep": ("+sweep=<name>", "a search space for -m or mode=autotune")}


def list_groups_by_use() -> None:
    """Make Hydra's $APP_CONFIG_GROUPS (in `--help`) leave out `KEY_GROUPS` and list them after, each with its key."""
    from hydra._internal.hydra import Hydra

    original = Hydra.format_config_groups
    if getattr(original, "by_use", False):  # once per process
        return

    def format_config_groups(self: Hydra, predicate: Callable[[str], bool], compact: bool = True) -> str:
        text = original(self, lambda group: predicate(group) and group not in KEY_GROUPS, compact)
        shown = [group for group in KEY_GROUPS if predicate(group) and group in self.list_all_config_groups()]
        if not shown:  # Hydra's own groups (--hydra-help)
            return text
        lines = ["", "Preset folders applied through a key (not group=option):"]
        for group in shown:
            key, what = KEY_GROUPS[group]
            options = ", ".join(sorted(self.config_loader.get_group_options(group)))
            lines.append(f"{key}: {group}/ ({what}): {options}")
        return text + "\n".join(lines) + "\n"

    format_config_groups.by_use = True  # type: ignore[attr-defined]
    Hydra.format_config_groups = format_config_groups  # type: ignore[method-assign]
