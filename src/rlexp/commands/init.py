"""mode=init: copies of the shipped presets to edit and use with --config-dir."""
from __future__ import annotations

import logging

from omegaconf import DictConfig

from rlexp.errors import UserError
from rlexp.runs.dirs import absolute
from rlexp.runs.files import check_writable, write_atomic

log = logging.getLogger("rlexp")


PRESET_GROUPS = ("agent", "env", "model", "buffer", "tuned", "logger", "sweep")


def init_presets(cfg: DictConfig) -> float:
    """mode=init +dir=DIR: copies of the shipped presets to edit; run them with --config-dir DIR, where a
    file of the same name replaces the shipped one. Existing files are kept."""
    from importlib import resources

    if not cfg.get("dir"):
        raise UserError("mode=init needs a directory: python -m rlexp mode=init +dir=myconf")
    target = absolute(str(cfg.dir))
    check_writable(target, f"+dir={cfg.dir}")
    shipped = resources.files("rlexp.conf")
    written = kept = 0
    files = [("", shipped.joinpath("agent_base.yaml"))]
    files += [(group, p) for group in PRESET_GROUPS for p in shipped.joinpath(group).iterdir()
              if p.name.endswith(".yaml")]
    for group, preset in files:
        path = target / group / preset.name
        if path.exists():
            kept += 1
            continue
        try:
            write_atomic(path, lambda f: f.write(preset.read_bytes()))
        except OSError as e:
            raise UserError(f"+dir={cfg.dir}: could not write {path} ({e.strerror or e}); {written} presets were "
                            "copied, pick a writable directory or free space") from None
        written += 1
    log.info(f"{written} presets copied to {target}" + (f" ({kept} existing files kept)" if kept else "")
             + f"; edit or add presets there and run: python -m rlexp --config-dir {cfg.dir} agent=... env=...")
    return float(written)
