"""Your presets win: the dir given with `--config-dir` (or `-cd`) is searched before rlexp's shipped presets,
so `myconf/model/mlp.yaml` replaces the shipped `model/mlp.yaml`. (Hydra itself searches that dir after
the application's own configs, where a same-named file is never read.)"""
from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from hydra.core.config_search_path import ConfigSearchPath, SearchPathQuery
from hydra.plugins.search_path_plugin import SearchPathPlugin

SHIPPED = "pkg://rlexp.conf"


def user_config_dir(argv: Sequence[str]) -> str | None:
    """The value of --config-dir / -cd in a command line (`--config-dir DIR` or `--config-dir=DIR`)."""
    found = None
    for i, arg in enumerate(argv):
        for flag in ("--config-dir", "-cd"):
            if arg == flag and i + 1 < len(argv):
                found = argv[i + 1]
            elif arg.startswith(f"{flag}="):
                found = arg.split("=", 1)[1]
    return found


class UserPresetsFirst(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        directory = user_config_dir(sys.argv[1:])
        if not directory or not any(e.path == SHIPPED for e in search_path.get_path()):
            return  # another Hydra app, or no user presets
        search_path.prepend(provider="rlexp-user", path=f"file://{os.path.abspath(directory)}",
                            anchor=SearchPathQuery(provider="main"))
