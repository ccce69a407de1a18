"""mode=init: copies of the shipped presets to edit and use with --config-dir."""
from __future__ import annotations

import logging

from omegaconf import DictConfig

from rlexp.errors import UserError
from rlexp.rundirs import absolute

log = logging.getLogger("rlexp")


PRESET_GROUPS = ("agent", "env", "model", "buffer", "tuned", "logger", "sweep")


def init_presets(cfg: DictConfig) -> float:
    """mode=init +dir=DIR: copies of the shipped presets to edit; run them with --config-dir DIR, where a
    file of the same name replaces the shipped one. Existing files are kept."""
    from importlib import resources

    if not cfg.get("dir"):
        raise UserError("mode=init needs a directory: python -m rlexp mode=init +dir=myconf")
    target = absolute(str(cfg.dir))
    if target.exists() and not target.is_dir():
        raise UserError(f"+dir={cfg.dir} is a file; pass a directory")
    shipped = resources.files("rlexp.conf")
    written = kept = 0
    files = [("", shipped.joinpath("agent_base.yaml"))]
    files += [(group, p) for group in PRESET_GROUPS for p in shipped.joinpath(group).iterdir() if p.name.endswith(".yaml")]
    for group, preset in files:
        path = target / group / preset.name
        if path.exists():
            kept += 1
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(preset.read_text())
        written += 1
    log.info(f"{written} presets copied to {target}" + (f" ({kept} existing files kept)" if kept else "")
             + f"; edit or add presets there and run: python -m rlexp --config-dir {cfg.dir} agent=... env=...")
    return float(written)
