"""RL Zoo's hyperparameter files read as data: the row for an env id, and its string entries parsed without
evaluating them (`policy_kwargs: "dict(net_arch=[64, 64], activation_fn=nn.ReLU)"`, `normalize`, `lin_` schedules).

The shipped files are rl-baselines3-zoo's own (`hyperparams/`, MIT licence beside them, version in SOURCE); a
user's file given as `zoo.file` is read by the same rules."""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from rlexp.errors import UserError

ZOO_FILES = ("a2c", "ars", "crossq", "ddpg", "dqn", "ppo", "ppo_lstm", "qrdqn", "sac", "td3", "tqc", "trpo")
VERSION_LINE = re.compile(r"^rl-baselines3-zoo (\S+)")


class ZooRowError(UserError):
    """A row rlexp cannot train as RL Zoo does: one line naming the file, the row and the key."""


@dataclass(frozen=True)
class ZooRow:
    """One row of an RL Zoo file: `source` names it (`ppo.yml Hopper-v4 (rl-baselines3-zoo 2.9.0a2)`)."""
    algo: str            # the file's algorithm: a2c, ddpg, dqn, ppo, ppo_lstm, sac, td3, trpo
    key: str             # the row's name in the file: an env id, `atari` or `default`
    values: dict[str, Any] = field(default_factory=dict)
    file: str = ""       # the file's name as shown: `ppo.yml`, or the user's path
    version: str = ""    # `rl-baselines3-zoo 2.9.0a2`, or `your own file`

    @property
    def source(self) -> str:
        return f"{self.file} {self.key} ({self.version})"

    def refuse(self, key: str, why: str) -> ZooRowError:
        return ZooRowError(f"RL Zoo row {self.file} {self.key}: {key} {why}")


def shipped_dir() -> Any:
    return resources.files("rlexp.presets.zoo") / "hyperparams"


def shipped_version() -> str:
    match = VERSION_LINE.match((shipped_dir() / "SOURCE").read_text())
    return f"rl-baselines3-zoo {match.group(1)}" if match else "rl-baselines3-zoo"


def load_file(algo: str, path: str | Path | None = None) -> tuple[dict[str, dict], str, str]:
    """(rows by name, the file's name as shown, its version) of the shipped `<algo>.yml`, or of the user's
    `path` (a whole RL Zoo file, or a file holding the rows they want)."""
    if path is None:
        text, name, version = (shipped_dir() / f"{algo}.yml").read_text(), f"{algo}.yml", shipped_version()
    else:
        try:
            text = Path(path).expanduser().read_text()
        except OSError as error:
            raise UserError(f"zoo.file={path}: cannot be read ({error.strerror}); give the path of an RL Zoo "
                            f"hyperparameter file such as hyperparams/{algo}.yml") from None
        name, version = str(path), "your own file"
    try:
        rows = yaml.safe_load(text) or {}  # YAML's own anchors and `<<:` merge keys, as RL Zoo reads them
    except yaml.YAMLError as error:
        raise UserError(f"zoo.file={path}: not valid YAML ({str(error).splitlines()[0]})") from None
    if not isinstance(rows, dict) or not all(isinstance(row, dict) for row in rows.values()):
        raise UserError(f"zoo.file={name}: an RL Zoo file maps env ids to rows of hyperparameters "
                        "(`Hopper-v4: {n_timesteps: 1e6, ...}`)")
    return {str(key): dict(row) for key, row in rows.items()}, name, version


def id_base(env_id: str) -> str:
    """An id without its version and namespace: `Hopper-v5` -> `Hopper`, `ALE/Pong-v5` -> `Pong`."""
    return re.sub(r"-v\d+$", "", env_id.rsplit("/", 1)[-1].rsplit(":", 1)[-1])


def row_name(rows: dict[str, dict], env_id: str, atari: bool, masked_velocity: bool = False) -> str | None:
    """The row RL Zoo trains `env_id` with: the id itself; else the same env at another version (RL Zoo's
    MuJoCo rows say v4, gymnasium ships v5); `atari` for an ALE game; with `masked_velocity`, the `<Env>NoVel`
    row (ppo_lstm.yml's partially observed envs, rlexp's MaskVelocity wrapper)."""
    base = id_base(env_id) + ("NoVel" if masked_velocity else "")
    if not masked_velocity and env_id in rows:
        return env_id
    versions = sorted((name for name in rows if "/" not in name and id_base(name) == base),
                      key=lambda name: int(name.rsplit("-v", 1)[-1]) if "-v" in name else -1)
    if versions:
        return versions[-1]
    if atari and "atari" in rows and not masked_velocity:
        return "atari"
    return None


def find_row(algo: str, env_id: str, atari: bool, masked_velocity: bool = False,
             path: str | Path | None = None, row: str | None = None) -> ZooRow | None:
    """The row of `<algo>.yml` (shipped, or the user's `path`) for `env_id`; `row` names one explicitly. A user's
    file without a row for the env gives its `default` row, as RL Zoo does; the shipped files' `default` rows (SB3's
    defaults) only by name: rlexp's fallback presets train the envs RL Zoo has no row for."""
    rows, name, version = load_file(algo, path)
    if row is not None:
        if row not in rows:
            raise UserError(f"zoo.row={row}: {name} has no such row; it has {', '.join(sorted(rows))}")
        key = row
    else:
        key = row_name(rows, env_id, atari, masked_velocity)
        if key is None and path is not None and "default" in rows:
            key = "default"
    if key is None:
        return None
    return ZooRow(algo, key, rows[key], name, version)


# ----- string entries, parsed -------------------------------------------------------------------------------
def default_row(algo: str) -> str | None:
    """`<algo>.yml default` where the shipped file has that row (RL Zoo trains it on envs without a row)."""
    return f"{algo}.yml default" if "default" in load_file(algo)[0] else None


def schedule(value: Any) -> tuple[float, str]:
    """(initial value, `constant` | `linear`) of a number or RL Zoo's `lin_<value>` string."""
    if isinstance(value, str) and value.startswith("lin_"):
        return float(value[4:]), "linear"
    return float(value), "constant"


def literal_dict(text: Any, what: str, row: ZooRow) -> dict[str, Any]:
    """A `dict(key=value, ...)` or `{'key': value}` string (policy_kwargs, normalize, ...) as a dict. Names
    (`nn.ReLU`, `RMSpropTFLike`) become their dotted text; nothing is evaluated."""
    if isinstance(text, dict):
        return dict(text)
    try:
        node = ast.parse(str(text).strip(), mode="eval").body
        return _value(node)
    except (SyntaxError, ValueError, TypeError, AttributeError) as error:
        raise row.refuse(what, f"= {text!r} is not a dict of plain values ({error})") from None


def _value(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand)
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_value(item) for item in node.elts]
    if isinstance(node, ast.Dict):
        return {_value(key): _value(value) for key, value in zip(node.keys, node.values)}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
        return {keyword.arg: _value(keyword.value) for keyword in node.keywords}
    if isinstance(node, ast.Name):
        return {"True": True, "False": False, "None": None}.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        return f"{_value(node.value)}.{node.attr}"
    raise ValueError(f"{ast.unparse(node)} is not a plain value")


def wrappers(value: Any) -> list[tuple[str, dict[str, Any]]]:
    """RL Zoo's `env_wrapper` entry (a name, a list of names, or of {name: kwargs}) as (name, kwargs) pairs."""
    entries = value if isinstance(value, list) else [value]
    pairs = []
    for entry in entries:
        if isinstance(entry, dict):
            pairs += [(str(name), dict(kwargs or {})) for name, kwargs in entry.items()]
        else:
            pairs.append((str(entry), {}))
    return pairs
