"""Resume restores exactly what was saved; failures leave the previous checkpoint loadable."""
import errno

import numpy as np
import pytest

from rlexp.agents import A2C, DQN, PPO, TD3
from rlexp.agents.base import TrainingDiverged
from rlexp.buffers import ReplayBuffer
from rlexp.envs.make import make_envs


def dqn(**kwargs):
    return DQN(make_envs("CartPole-v1", n_envs=1, seed=0), buffer=ReplayBuffer(5000, 200, 32), seed=0,
               train_freq=16, gradient_steps=4, epsilon_decay_steps=2000, lr_schedule="linear", **kwargs)


def test_dqn_resume_restores_optimizer_schedules_and_buffer(tmp_path):
    agent = dqn()
    agent.fit(max_steps=800, progress="none")
    agent.save(tmp_path / "last.ckpt")
    resumed = dqn()
    resumed.load(tmp_path / "last.ckpt")
    resumed.max_steps = agent.max_steps
    for a, b in zip(agent.optimizer.variables, resumed.optimizer.variables):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # Adam moments and iteration count
    assert resumed.steps == agent.steps and resumed.epsilon == agent.epsilon
    assert resumed.current_lr() == agent.current_lr() < agent.lr  # linear schedule continues, not restarts
    assert resumed.buffer.size == agent.buffer.size > 0 and resumed.buffer.index == agent.buffer.index
    np.testing.assert_array_equal(resumed.buffer.data["obs"][: agent.buffer.size], agent.buffer.data["obs"][: agent.buffer.size])
    assert resumed.rng.bit_generator.state == agent.rng.bit_generator.state
    np.testing.assert_array_equal(resumed.tf_rng.state.numpy(), agent.tf_rng.state.numpy())
    before = resumed.model.get_weights()[0].copy()
    resumed.train_iteration()  # the first update samples from the restored, non-empty buffer
    assert not np.array_equal(before, resumed.model.get_weights()[0])


def test_normalizer_and_noise_state_survive_resume(tmp_path):
    def ppo():
        return PPO(make_envs("Pendulum-v1", n_envs=2, seed=0), seed=0, n_steps=16, mini_batches=2, use_sde=True,
                   normalize_obs=True, normalize_reward=True)

    agent = ppo()
    agent.fit(max_steps=64, progress="none")
    agent.save(tmp_path / "last.ckpt")
    resumed = ppo()
    resumed.load(tmp_path / "last.ckpt")
    for key, value in agent.normalizer.state_dict().items():
        np.testing.assert_array_equal(resumed.normalizer.state_dict()[key], value)
    np.testing.assert_array_equal(resumed.sde_noise.numpy(), agent.sde_noise.numpy())
    np.testing.assert_array_equal(resumed.log_std.numpy(), agent.log_std.numpy())


def test_td3_resume_keeps_update_counter(tmp_path):
    def td3():
        return TD3(make_envs("Pendulum-v1", n_envs=1, seed=0), buffer=ReplayBuffer(1000, 100, 16), seed=0)

    agent = td3()
    agent.fit(max_steps=150, progress="none")
    agent.save(tmp_path / "last.ckpt")
    resumed = td3()
    resumed.load(tmp_path / "last.ckpt")
    assert int(resumed.updates.numpy()) == int(agent.updates.numpy()) > 0


def test_non_finite_loss_stops_and_keeps_the_last_checkpoint(tmp_path):
    agent = dqn()
    agent.fit(max_steps=400, progress="none", run_dir=tmp_path)
    saved = agent.read_state(tmp_path / "checkpoints" / "last.ckpt")["steps"]
    agent.train_iteration = lambda: {"loss": float("nan")}
    with pytest.raises(TrainingDiverged, match="non-finite loss at step"):
        agent.fit(max_steps=10_000, progress="none", run_dir=tmp_path)
    assert agent.read_state(tmp_path / "checkpoints" / "last.ckpt")["steps"] == saved
    dqn().load(tmp_path / "checkpoints" / "last.ckpt")


def test_failed_write_leaves_previous_checkpoint_loadable(tmp_path, monkeypatch):
    agent = dqn()
    agent.fit(max_steps=400, progress="none")
    path = tmp_path / "last.ckpt"
    agent.save(path)

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(np, "savez", disk_full)
    agent.steps += 1000
    with pytest.raises(OSError):
        agent.save(path)
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]  # no temporary file left behind
    assert dqn().load(path)["steps"] == agent.steps - 1000


def test_gsde_weights_load_into_a_one_env_player(tmp_path):
    def ppo(n_envs):
        return PPO(make_envs("Pendulum-v1", n_envs=n_envs, seed=0), seed=0, n_steps=8, mini_batches=1, use_sde=True)

    trained = ppo(4)
    trained.log_std.assign(np.random.default_rng(0).normal(size=trained.log_std.shape).astype(np.float32))
    trained.save(tmp_path / "last.ckpt")
    player = ppo(1)
    assert not np.array_equal(player.log_std.numpy(), trained.log_std.numpy())
    player.load(tmp_path / "last.ckpt", weights_only=True)  # per-env noise matrices are training state only
    np.testing.assert_array_equal(player.log_std.numpy(), trained.log_std.numpy())
    for a, b in zip(player.model.get_weights(), trained.model.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert player.sde_noise.shape == (1, *trained.log_std.shape)  # its own noise, one matrix for its one env


def test_run_configs_from_before_a_key_keep_the_behaviour_they_had():
    from omegaconf import OmegaConf

    from rlexp.runs.dirs import with_legacy_defaults

    old = with_legacy_defaults(OmegaConf.create({"env": {"id": "PongNoFrameskip-v4"}, "run": {"max_steps": 10}}))
    assert old.env.life_loss_terminal is False and old.run.eval_deterministic is True
    new = with_legacy_defaults(OmegaConf.create({"env": {"life_loss_terminal": True},
                                                 "run": {"eval_deterministic": False}}))
    assert new.env.life_loss_terminal is True and new.run.eval_deterministic is False
    assert "run" not in with_legacy_defaults(OmegaConf.create({"env": {}}))
    # TRPO summed a Gaussian policy's KL over action dimensions before agent.kl_reduction
    old_trpo = with_legacy_defaults(OmegaConf.create({"agent": {"_target_": "rlexp.agents.TRPO", "max_kl": 0.01}}))
    assert old_trpo.agent.kl_reduction == "sum"
    new_trpo = with_legacy_defaults(OmegaConf.create({"agent": {"_target_": "rlexp.agents.TRPO",
                                                                "kl_reduction": "mean"}}))
    assert new_trpo.agent.kl_reduction == "mean"
    ppo = with_legacy_defaults(OmegaConf.create({"agent": {"_target_": "rlexp.agents.PPO"}}))
    assert "kl_reduction" not in ppo.agent


@pytest.mark.parametrize("agent_cls,model", [(PPO, "lstm"), (A2C, "gru")])
def test_a_resumed_recurrent_run_starts_its_reset_envs_from_zero_states(tmp_path, agent_cls, model):
    """Resume resets the envs: every env starts an episode, so its recurrent state starts from zero, as in a
    new run, and not from the state the killed run's last episodes had reached."""
    def agent():
        extra = {"mini_batches": 1} if agent_cls is PPO else {}
        return agent_cls(make_envs("CartPole-v1", n_envs=2, seed=0, vectorization="sync"), model=model, seed=0,
                         n_steps=8, **extra)

    trained = agent()
    trained.fit(max_steps=48, progress="none")
    assert np.abs(trained.rnn_states[0].numpy()).sum() > 0 and not trained.episode_starts.numpy().all()
    trained.save(tmp_path / "last.ckpt")
    for resumed in (trained, agent()):  # the run's own agent, and a new process's
        resumed.load(tmp_path / "last.ckpt")
        for state in resumed.rnn_states:
            np.testing.assert_array_equal(state.numpy(), np.zeros(state.shape))
        np.testing.assert_array_equal(resumed.episode_starts.numpy(), [1.0, 1.0])
    batch = resumed.collect()  # the first step after resume acts from zero states, flagged as episode starts
    np.testing.assert_array_equal(batch["starts"].numpy()[0], [1.0, 1.0])
    for i, state in enumerate(resumed.rnn_states):
        np.testing.assert_array_equal(batch[f"state_{i}"].numpy()[0], np.zeros(state.shape))


def test_resume_names_a_missing_run_dir_a_file_and_a_folder_that_is_no_run(tmp_path):
    """+resume= on a folder that does not exist said `no checkpoint at <folder>/checkpoints/last.ckpt`."""
    from rlexp.commands.train import check_run_dir
    from rlexp.errors import UserError

    where = "pass the run dir of a training run (outputs/<date>/<time>_<agent>_<env>)"
    with pytest.raises(UserError) as error:
        check_run_dir(tmp_path / "no" / "such", "+resume=no/such")
    assert str(error.value) == f"+resume=no/such: no such run dir {tmp_path}/no/such; {where}"
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("seed: 0\n")
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "last.ckpt").write_bytes(b"")
    with pytest.raises(UserError) as error:
        check_run_dir(run / "checkpoints" / "last.ckpt", "+resume=x")
    assert str(error.value) == f"+resume=x: {run}/checkpoints/last.ckpt is a file; resume its run with +resume={run}"
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError) as error:
        check_run_dir(tmp_path / "empty", "+resume=empty")
    assert str(error.value) == (f"+resume=empty: {tmp_path}/empty is not a run dir (it has no checkpoints/last.ckpt "
                                f"or .hydra/config.yaml); {where}")
    check_run_dir(run, "+resume=run")
