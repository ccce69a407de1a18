"""Markdown tables of the agent presets (conf/agent/*.yaml), generated from their comments for docs/configuration.md."""
from __future__ import annotations

import re
from importlib import resources

AGENT_TITLES = {
    "agent_base": "Shared by all agents (`conf/agent_base.yaml`)",
    "a2c": "A2C (`agent=a2c`, discrete, continuous, multi-discrete, multi-binary; recurrent models)",
    "acer": "ACER (`agent=acer`, discrete)",
    "ars": "ARS (`agent=ars`, discrete, continuous; vector observations)",
    "ddpg": "DDPG (`agent=ddpg`, continuous)",
    "dqfd": "DQfD (`agent=dqfd`, discrete; DQN's options too)",
    "crossq": "CrossQ (`agent=crossq`, continuous; SAC's options too)",
    "dqn": "DQN / Double DQN (`agent=dqn`, discrete)",
    "naf": "NAF (`agent=naf`, continuous)",
    "ppo": "PPO (`agent=ppo`, discrete, continuous, multi-discrete, multi-binary; recurrent models)",
    "qrdqn": "QR-DQN (`agent=qrdqn`, discrete; DQN's options too)",
    "sac": "SAC (`agent=sac`, continuous)",
    "td3": "TD3 (`agent=td3`, continuous)",
    "tqc": "TQC (`agent=tqc`, continuous; SAC's options too)",
    "trpo": "TRPO (`agent=trpo`, discrete + continuous)",
    "vpg": "VPG (`agent=vpg`, discrete, continuous, multi-discrete, multi-binary; recurrent models)",
}
LINE = re.compile(r"^(\w+):\s*([^#]*?)\s*(?:#\s*(.*))?$")


def preset_rows(name: str) -> list[tuple[str, str, str]]:
    """(key, default, meaning) for each option line of conf/agent/<name>.yaml (or conf/agent_base.yaml)."""
    conf = resources.files("rlexp.conf")
    text = (conf.joinpath(f"{name}.yaml") if name == "agent_base" else conf.joinpath("agent", f"{name}.yaml")).read_text()
    rows = []
    for line in text.splitlines():
        m = LINE.match(line)
        if m and m.group(1) not in ("_target_", "defaults"):
            rows.append((m.group(1), m.group(2), m.group(3) or ""))
    return rows


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def agent_tables() -> str:
    """All agent tables as Markdown (the README's 'Agent hyperparameters' section)."""
    parts = []
    for name, title in AGENT_TITLES.items():
        parts.append(f"### {title}\n| key | default | meaning |\n|---|---|---|")
        parts.extend(f"| {k} | {v} | {_escape(m)} |" for k, v, m in preset_rows(name))
        parts.append("")
    return "\n".join(parts)


if __name__ == "__main__":
    print(agent_tables())
