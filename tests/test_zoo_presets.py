"""Tuned presets that quote RL Zoo carry values equivalent to SB3's, converted where conventions differ:
value_loss_coef multiplies half the value MSE (SB3's vf_coef the whole MSE), Keras's RMSprop adds epsilon
inside the square root (torch's outside), PPO/TRPO take a number of minibatches (SB3 a batch size)."""
import pytest
from hydra import compose, initialize_config_module

# RL Zoo's rows (rl-baselines3-zoo ppo.yml / a2c.yml / trpo.yml), SB3's defaults where a row is silent
ZOO = {
    ("ppo", "cartpole"): dict(n_envs=8, n_steps=32, batch_size=256, vf_coef=0.5, clip_range="lin_0.2", lr="lin"),
    ("ppo", "lunarlander"): dict(n_envs=16, n_steps=1024, batch_size=64, vf_coef=0.5, clip_range=0.2, lr="constant"),
    ("ppo", "pendulum"): dict(n_envs=4, n_steps=1024, batch_size=64, vf_coef=0.5, clip_range=0.2, lr="constant"),
    ("ppo", "pong"): dict(n_envs=8, n_steps=128, batch_size=256, vf_coef=0.5, clip_range="lin_0.1", lr="lin"),
    ("a2c", "cartpole"): dict(n_envs=8, n_steps=5, vf_coef=0.5, rmsprop_eps=1e-5),
    ("a2c", "pendulum"): dict(n_envs=8, n_steps=8, vf_coef=0.4, rmsprop_eps=1e-5, lr="lin"),
    ("a2c", "acrobot"): dict(n_envs=16, n_steps=5, vf_coef=0.5, rmsprop_eps=1e-5, lr="constant", normalize=True),
    ("a2c", "lunarlander"): dict(n_envs=8, n_steps=5, vf_coef=0.5, rmsprop_eps=1e-5, lr="lin", gamma=0.995),
    ("trpo", "cartpole"): dict(n_envs=2, n_steps=512, batch_size=512),
    ("trpo", "pendulum"): dict(n_envs=2, n_steps=1024, batch_size=128),
}


def composed(agent, env):
    """The config a run of agent=<agent> env=<env> trains: composed, then its RL Zoo row and tuned preset merged."""
    from hydra.core.hydra_config import HydraConfig

    from rlexp.presets.fallbacks import apply_fallback

    overrides = [f"agent={agent}", f"env={env}"]
    with initialize_config_module(config_module="rlexp.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides, return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)
        return apply_fallback(cfg, dict(cfg.hydra.runtime.choices), overrides)[0]


@pytest.mark.parametrize("agent, env", list(ZOO), ids=[f"{a}-{e}" for a, e in ZOO])
def test_tuned_preset_is_rl_zoos_row(agent, env):
    zoo, cfg = ZOO[(agent, env)], composed(agent, env)
    a = cfg.agent
    assert cfg.env.n_envs == zoo["n_envs"] and a.n_steps == zoo["n_steps"]
    if "vf_coef" in zoo:  # our 0.5 * MSE * coef == SB3's MSE * vf_coef
        assert a.value_loss_coef == pytest.approx(2 * zoo["vf_coef"])
    if "rmsprop_eps" in zoo:  # sqrt(v + eps_ours) == sqrt(v) + eps_torch at v = 0
        assert a.optimizer == "rmsprop" and a.opt_epsilon == pytest.approx(zoo["rmsprop_eps"] ** 2)
    if "batch_size" in zoo:
        assert a.mini_batches == zoo["n_steps"] * zoo["n_envs"] // zoo["batch_size"]
    if "clip_range" in zoo:
        linear = str(zoo["clip_range"]).startswith("lin_")
        assert a.clip_schedule == ("linear" if linear else "constant")
        assert a.clip_norm == float(str(zoo["clip_range"]).removeprefix("lin_"))
    if "normalize" in zoo:  # RL Zoo's `normalize: true`: VecNormalize's observations and rewards
        assert a.normalize_obs is a.normalize_reward is zoo["normalize"]
    if "gamma" in zoo:
        assert a.gamma == zoo["gamma"]
    if "lr" in zoo:
        assert a.lr_schedule == ("linear" if zoo["lr"] == "lin" else "constant")


@pytest.mark.parametrize("agent, values", [
    ("td3", dict(gamma=0.98, lr=1e-3, buffer=200_000, learning_starts=10_000)),
    ("sac", dict(gamma=0.99, lr=7.3e-4, buffer=1_000_000, learning_starts=10_000, lr_schedule="linear", tau=0.01)),
])
def test_lunarlandercontinuous_trains_rl_zoos_row_as_sb3_builds_it(agent, values):
    """No tuned preset over the row: SB3's Adam epsilon (1e-8 for off-policy agents), PyTorch's default init,
    the row's net_arch [400, 300] and values."""
    cfg = composed(agent, "lunarlander_continuous")
    assert cfg.agent.opt_epsilon == 1e-8 and cfg.model.initializer == "torch"
    assert [layer.get("units") for layer in cfg.model.layers] == [400, 300, None]
    assert (cfg.agent.gamma, cfg.agent.lr, cfg.buffer.max_size, cfg.buffer.initial_size) == (
        values["gamma"], values["lr"], values["buffer"], values["learning_starts"])
    assert cfg.agent.lr_schedule == values.get("lr_schedule", "constant") and cfg.agent.tau == values.get("tau", 0.005)


# RL Zoo's td3.yml / sac.yml MuJoCo rows (&mujoco-defaults) with SB3's defaults where a row is silent:
# TD3: net_arch [400, 300], lr 1e-3, batch 256, learning_starts 10k, N(0, 0.1) noise, buffer 1e6, gamma 0.99;
# SAC: its row sets learning_starts only, so SB3's SAC: [256, 256], lr 3e-4, batch 256, buffer 1e6, gamma 0.99.
MUJOCO_ROWS = {"td3": dict(units=[400, 300, None], lr=1e-3, noise=0.1),
               "sac": dict(units=[256, 256, None], lr=3e-4)}


@pytest.mark.parametrize("agent, env", [("td3", "ant"), ("td3", "walker2d"), ("td3", "halfcheetah"), ("td3", "hopper"),
                                        ("sac", "ant"), ("sac", "halfcheetah"), ("sac", "hopper"), ("sac", "walker2d")])
def test_mujoco_pair_trains_rl_zoos_row_as_sb3_builds_it(agent, env):
    """The MuJoCo pairs train the row itself: SB3's Adam epsilon 1e-8 and PyTorch's default init, nothing of
    rlexp's over them."""
    cfg, row = composed(agent, env), MUJOCO_ROWS[agent]
    assert cfg.agent.opt_epsilon == 1e-8 and cfg.model.initializer == "torch"
    assert [layer.get("units") for layer in cfg.model.layers] == row["units"]
    assert (cfg.agent.gamma, cfg.agent.lr, cfg.agent.tau) == (0.99, row["lr"], 0.005)
    assert (cfg.buffer.max_size, cfg.buffer.initial_size, cfg.buffer.batch_size) == (1_000_000, 10_000, 256)
    if "noise" in row:
        assert (cfg.agent.noise_type, cfg.agent.step_noise_coef) == ("normal", row["noise"])


def test_dqn_pong_trains_rl_zoos_atari_row_as_sb3_builds_it():
    """dqn.yml's atari row (lr 1e-4, buffer 100k, learning_starts 100k, 1 env) on SB3's DQN: Adam epsilon 1e-8 and
    PyTorch's default init of its Nature CNN; rlexp adds only its stop rule."""
    cfg = composed("dqn", "pong")
    assert cfg.agent.opt_epsilon == 1e-8 and cfg.model.initializer == "torch"
    assert (cfg.agent.lr, cfg.buffer.max_size, cfg.buffer.initial_size, cfg.env.n_envs) == (1e-4, 100_000, 100_000, 1)
    assert cfg.run.target_reward == 20


@pytest.mark.parametrize("agent, values", [
    ("td3", dict(units=[400, 300, None], lr=1e-3, gamma=0.98, tau=0.005, buffer=200_000, train_freq=1, sde=None)),
    ("sac", dict(units=[400, 300, None], lr=7.3e-4, gamma=0.98, tau=0.02, buffer=300_000, train_freq=64, sde=True)),
])
def test_bipedalwalker_trains_rl_zoos_row_as_sb3_builds_it(agent, values):
    """td3.yml / sac.yml BipedalWalker-v3 (SAC: gSDE with log std -3, 64 updates every 64 steps), learning from
    10k random steps, on SB3's Adam epsilon 1e-8 and PyTorch's default init."""
    cfg = composed(agent, "bipedal")
    assert cfg.agent.opt_epsilon == 1e-8 and cfg.model.initializer == "torch"
    assert [layer.get("units") for layer in cfg.model.layers] == values["units"]
    assert (cfg.agent.lr, cfg.agent.gamma, cfg.agent.tau) == (values["lr"], values["gamma"], values["tau"])
    assert (cfg.buffer.max_size, cfg.buffer.initial_size, cfg.buffer.batch_size) == (values["buffer"], 10_000, 256)
    assert cfg.agent.train_freq == cfg.agent.gradient_steps == values["train_freq"]
    if values["sde"]:
        assert cfg.agent.use_sde is True and cfg.agent.log_std_init == -3
