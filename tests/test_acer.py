"""ACER's update (`ACER.learn` / `ACER.update`) against hand-computed cases and a NumPy reference written from
the paper (Wang et al. 2017) and OpenAI baselines' ACER, not from rlexp's code.

The gradients an update applies are read from the weights: the agent's optimizer is replaced by plain SGD,
so `before - after = learning_rate * gradient` exactly.

Policy loss (per sample, averaged over the batch), with the weights in brackets held fixed:
    -[min(c, rho_a) (Q_ret - V)] log f(a)  -  sum_b [[1 - c / rho(b)]_+ f(b) (Q(b) - V)] log f(b)
    - entropy_coef * entropy,                                  V = sum_b f(b) Q(b), rho = f / mu.
Trust region: with g the per-sample ascent direction with respect to the probabilities f and
k = d KL(average || f) / df = -f_average / f, the applied direction is g - max(0, (k.g - delta) / |k|^2) k.
Q loss: 0.5 * mean((Q_ret - Q(a))^2), times value_loss_coef.
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

from rlexp.agents import ACER
from rlexp.buffers import RolloutBuffer
from rlexp.envs.make import make_envs

TINY_MLP = {"layers": [{"type": "dense", "units": 8, "activation": "tanh"}, {"type": "dense", "output": True}],
            "initializer": "orthogonal", "gain": 1.0}


def use_sgd(agent, learning_rate=1.0):
    agent.optimizer = keras.optimizers.SGD(learning_rate=learning_rate)
    agent.optimizer.build(agent.model.trainable_variables)


def weights(model):
    return [w.numpy().copy() for w in model.weights]


# ----- hand-computed cases: a model whose outputs do not depend on the observation ---------------------------
def constant_agent(n_envs, probs, q_values, average_probs, **kwargs):
    """One-step rollouts (n_steps=1); every observation gets policy `probs` and Q-values `q_values`; the average
    network gives `average_probs`. All kernels are zero, so only the output biases get gradients."""
    agent = ACER(make_envs("CartPole-v1", n_envs=n_envs, seed=0), model=TINY_MLP, seed=0, n_steps=1, replay_ratio=0,
                 grad_norm=None, entropy_coef=0.0, **kwargs)
    for model, policy in ((agent.model, probs), (agent.average, average_probs)):
        for w in model.weights:
            w.assign(tf.zeros_like(w))
        model.get_layer("policy").bias.assign(np.log(np.asarray(policy, np.float32)))
        model.get_layer("q").bias.assign(np.asarray(q_values, np.float32))
    use_sgd(agent)
    return agent


def one_step_learn(agent, actions, rewards, mu):
    """`learn` on one step per env, each ending its episode (Q_ret = r: the next observation does not count)."""
    n = agent.n_envs
    obs = tf.constant(np.random.default_rng(0).normal(size=(2, n, 4)).astype(np.float32))
    metrics = agent.learn(obs, tf.constant([actions], tf.int64), tf.constant([rewards], tf.float32),
                          tf.ones((1, n)), tf.constant([mu], tf.float32))
    return {k: float(v) for k, v in metrics.items()}


def head_bias_gradient(agent, head, before):
    """The gradient the update applied to an output head's bias (SGD, learning rate 1)."""
    return before[head] - agent.model.get_layer(head).bias.numpy()


def test_truncated_importance_weight_and_bias_correction_over_all_actions_by_hand():
    # f = [0.8, 0.2], Q = [1, 3], V = 0.8 + 0.6 = 1.4, c = 10.
    # env 0: action 0, mu = [0.05, 0.95]: rho = [16, 0.21]; reward 2, so Q_ret = 2 and Q_ret - V = 0.6.
    #   policy term: -min(10, 16) * 0.6 * log 0.8 = -6 log 0.8 (the weight is truncated at c)
    #   bias correction: [1 - 10/16]_+ = 0.375 on action 0, 0 on action 1 (rho < c): weight
    #   0.375 * f(0) * (Q(0) - V) = 0.375 * 0.8 * (-0.4) = -0.12, term +0.12 log 0.8
    # env 1: action 1, mu = [0.04, 0.96]: rho = [20, 5/24]; reward 4, so Q_ret = 4, Q_ret - V = 2.6.
    #   policy term: -(5/24 * 2.6) log 0.2 = -(13/24) log 0.2 (not truncated)
    #   bias correction on the action NOT taken: [1 - 10/20]_+ = 0.5, weight 0.5 * 0.8 * (-0.4) = -0.16
    agent = constant_agent(2, [0.8, 0.2], [1.0, 3.0], [0.5, 0.5], trust_region=False, ema_alpha=0.9)
    before = {head: agent.model.get_layer(head).bias.numpy().copy() for head in ("policy", "q")}
    average_before = agent.average.get_layer("policy").bias.numpy().copy()
    metrics = one_step_learn(agent, actions=[0, 1], rewards=[2.0, 4.0], mu=[[0.05, 0.95], [0.04, 0.96]])
    # the reported policy loss is the truncated term alone
    np.testing.assert_allclose(metrics["policy_loss"], -(6 * np.log(0.8) + 13 / 24 * np.log(0.2)) / 2, rtol=1e-4)
    np.testing.assert_allclose(metrics["value_loss"], 0.5 * ((2 - 1) ** 2 + (4 - 3) ** 2) / 2, rtol=1e-5)
    np.testing.assert_allclose(metrics["entropy"], -(0.8 * np.log(0.8) + 0.2 * np.log(0.2)), rtol=1e-4)
    # For a softmax, d(-w log f(b)) / dlogits = -w (onehot(b) - f), with f - onehot(0) = [-0.2, 0.2] and
    # f - onehot(1) = [0.8, -0.8]:
    #   env 0: policy 6 * [-0.2, 0.2] = [-1.2, 1.2]; bias correction -0.12 * [-0.2, 0.2] = [0.024, -0.024]
    #   env 1: policy 13/24 * [0.8, -0.8] = [13/30, -13/30]; bias correction -0.16 * [-0.2, 0.2] = [0.032, -0.032]
    # mean over the 2 samples. The bias correction's f(b) weight is not differentiated (if it were, its
    # gradient would gain -w' (log f + 1) terms), and it covers action 0 in env 1 although action 1 was taken.
    expected = (np.array([-1.2, 1.2]) + [0.024, -0.024] + [13 / 30, -13 / 30] + [0.032, -0.032]) / 2
    np.testing.assert_allclose(head_bias_gradient(agent, "policy", before), expected, rtol=1e-4)
    # Q loss: d/dQ(a) 0.5 * 0.5 * mean((Q_ret - Q(a))^2) = 0.5 * (Q(a) - Q_ret) / 2 on the taken action
    np.testing.assert_allclose(head_bias_gradient(agent, "q", before), [0.5 * (1 - 2) / 2, 0.5 * (3 - 4) / 2], rtol=1e-5)
    # the average network moved 10% of the way to the updated model
    new_policy_bias = np.log([0.8, 0.2]) - expected
    np.testing.assert_allclose(agent.average.get_layer("policy").bias.numpy(),
                               0.9 * average_before + 0.1 * new_policy_bias, rtol=1e-4)


def test_entropy_bonus_gradient_by_hand():
    # one sample with no advantage (mu = f: rho = 1; reward V = 1.4: Q_ret - V = 0) and Q(a) = Q_ret:
    # only the entropy term moves the policy. d(-H)/dlogits = f * (log f + H), H = -sum f log f
    agent = constant_agent(1, [0.8, 0.2], [1.4, 1.4], [0.5, 0.5], trust_region=False)
    agent.entropy_coef = 0.1
    before = {head: agent.model.get_layer(head).bias.numpy().copy() for head in ("policy", "q")}
    one_step_learn(agent, actions=[0], rewards=[1.4], mu=[[0.8, 0.2]])
    f = np.array([0.8, 0.2])
    h = -(f * np.log(f)).sum()
    np.testing.assert_allclose(head_bias_gradient(agent, "policy", before), 0.1 * f * (np.log(f) + h), rtol=1e-3, atol=1e-7)
    np.testing.assert_allclose(head_bias_gradient(agent, "q", before), [0.0, 0.0], atol=1e-6)


def test_trust_region_projects_the_gradient_of_rows_that_leave_the_region_by_hand():
    # f = [0.8, 0.2], average = [0.5, 0.5]: k = -average / f = [-0.625, -2.5], |k|^2 = 6.640625; delta = 0.1.
    # mu = f: rho = 1, no truncation, no bias correction. Q = [1, 3], V = 1.4; both envs take action 0.
    # env 0: reward 0, Q_ret - V = -1.4. Per-sample ascent direction w.r.t. f: g = [-1.4 / 0.8, 0] = [-1.75, 0];
    #   k.g = 1.09375 > delta, so g' = g - (1.09375 - 0.1) / 6.640625 * k.
    # env 1: reward 4, Q_ret - V = 2.6: g = [3.25, 0], k.g = -2.03125 <= delta: unchanged.
    agent = constant_agent(2, [0.8, 0.2], [1.0, 3.0], [0.5, 0.5], trust_region=True, delta=0.1)
    before = {head: agent.model.get_layer(head).bias.numpy().copy() for head in ("policy", "q")}
    one_step_learn(agent, actions=[0, 0], rewards=[0.0, 4.0], mu=[[0.8, 0.2], [0.8, 0.2]])
    f, k = np.array([0.8, 0.2]), np.array([-0.625, -2.5])
    scale = (1.09375 - 0.1) / 6.640625
    g0 = np.array([-1.75, 0.0]) - scale * k  # [-1.65647, 0.37412]
    assert np.isclose(k @ g0, 0.1)  # on the boundary of the linearised KL constraint
    # descent on the loss w.r.t. f is -g'; through the softmax, dL/dlogits = f * (dL/df - f . dL/df)
    logits_grad0 = f * (-g0 - f @ -g0)  # [0.32489, -0.32489], instead of [0.28, -0.28] without projection
    logits_grad1 = -2.6 * (np.array([1.0, 0.0]) - f)  # [-0.52, 0.52]
    np.testing.assert_allclose(head_bias_gradient(agent, "policy", before), (logits_grad0 + logits_grad1) / 2, rtol=1e-4)


def test_trust_region_update_also_trains_the_q_head_by_hand():
    # the case above; the Q loss's gradient is added to the projected policy gradient, unprojected:
    # Q(0) = 1 in both envs, Q_ret = 0 and 4: d/dQ(0) = 0.5 * ((1 - 0) + (1 - 4)) / 2 = -0.5
    agent = constant_agent(2, [0.8, 0.2], [1.0, 3.0], [0.5, 0.5], trust_region=True, delta=0.1)
    before = {head: agent.model.get_layer(head).bias.numpy().copy() for head in ("policy", "q")}
    metrics = one_step_learn(agent, actions=[0, 0], rewards=[0.0, 4.0], mu=[[0.8, 0.2], [0.8, 0.2]])
    np.testing.assert_allclose(metrics["value_loss"], 0.5 * ((0 - 1) ** 2 + (4 - 1) ** 2) / 2, rtol=1e-5)
    np.testing.assert_allclose(head_bias_gradient(agent, "q", before), [0.5 * ((1 - 0) + (1 - 4)) / 2, 0.0], rtol=1e-5,
                               atol=1e-7)


# ----- NumPy reference for a whole update ---------------------------------------------------------------------
def softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def retrace_by_forward_sums(rewards, dones, q_a, values, last_values, rho_bar, gamma):
    """Q_ret(t) as a forward sum over the rollout's steps s >= t, without the backward recursion:
    Q_ret(t) = sum_s w(t, s) [r_s + gamma (1 - d_s) X(s + 1)], with X(s + 1) = V(s + 1) - rho_bar(s + 1) Q(s + 1, a)
    and X(T) = V(s_T), and w(t, s) = prod_{u = t+1..s} gamma (1 - d_{u-1}) rho_bar(u) (w(t, t) = 1)."""
    T = len(rewards)
    out = np.zeros_like(rewards)
    for t in range(T):
        w = np.ones_like(last_values)
        for s in range(t, T):
            if s > t:
                w = w * gamma * (1 - dones[s - 1]) * rho_bar[s]
            x = last_values if s == T - 1 else values[s + 1] - rho_bar[s + 1] * q_a[s + 1]
            out[t] += w * (rewards[s] + gamma * (1 - dones[s]) * x)
    return out


def acer_reference(logits, q, average_logits, actions, rewards, dones, mu, *, gamma, c, delta, entropy_coef,
                   value_coef, trust_region):
    """float64 losses and the loss's gradients w.r.t. the model outputs (logits, Q) of [T + 1, N, A] tensors.
    The epsilons that guard logs and divisions are left out (they change nothing at these probabilities)."""
    T, N, A = mu.shape
    batch = T * N
    probs = softmax(logits)
    values = (probs * q).sum(-1)
    f, q_t, v = probs[:T], q[:T], values[:T]
    onehot = np.eye(A)[actions]
    f_a, q_a = (f * onehot).sum(-1), (q_t * onehot).sum(-1)
    rho = f / mu
    rho_a = (rho * onehot).sum(-1)
    q_ret = retrace_by_forward_sums(rewards, dones, q_a, v, values[T], np.minimum(1.0, rho_a), gamma)
    weight = np.minimum(c, rho_a) * (q_ret - v)  # held fixed
    bias_weights = np.maximum(0.0, 1.0 - c / rho) * f * (q_t - v[..., None])  # held fixed, every action
    out = dict(policy_loss=-np.mean(weight * np.log(f_a)),
               bias_loss=-np.mean((bias_weights * np.log(f)).sum(-1)),
               entropy=np.mean(-(f * np.log(f)).sum(-1)),
               value_loss=0.5 * np.mean(np.square(q_ret - q_a)))
    # per-sample ascent direction w.r.t. f: d/df of weight log f(a) + sum bias_weights log f + ent_coef * H(f)
    g = (onehot * weight[..., None] + bias_weights) / f - entropy_coef * (np.log(f) + 1.0)
    k = -softmax(average_logits)[:T] / f
    kg = (k * g).sum(-1)
    if trust_region:
        g = g - np.maximum(0.0, (kg - delta) / (k * k).sum(-1))[..., None] * k
    loss_f = -g / batch  # gradient of the batch-mean loss w.r.t. f
    d_logits, d_q = np.zeros_like(logits), np.zeros_like(q)
    d_logits[:T] = f * (loss_f - (f * loss_f).sum(-1, keepdims=True))  # through the softmax
    d_q[:T] = value_coef * onehot * (q_a - q_ret)[..., None] / batch
    return out | dict(d_logits=d_logits, d_q=d_q, q_ret=q_ret, rho=rho, rho_a=rho_a, k_dot_g=kg)


T, N = 3, 2


def hand_built_rollout():
    """3 steps x 2 CartPole envs; env 0's episode ends at step 1. Behaviour probabilities mu with small entries
    make rho = f / mu exceed c for taken and for untaken actions."""
    rng = np.random.default_rng(3)
    return dict(obs=rng.normal(size=(T, N, 4)).astype(np.float32), last_obs=rng.normal(size=(N, 4)).astype(np.float32),
                actions=np.array([[0, 1], [1, 1], [0, 0]], np.int64),
                rewards=np.array([[1.0, -0.5], [2.0, 0.3], [-1.0, 1.5]], np.float32),
                dones=np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]], np.float32),
                mu=np.array([[[0.02, 0.98], [0.97, 0.03]], [[0.6, 0.4], [0.5, 0.5]], [[0.03, 0.97], [0.98, 0.02]]],
                            np.float32))


@pytest.mark.parametrize("trust_region,grad_norm", [(True, None), (False, None), (True, 0.05)],
                         ids=["trust_region", "no_trust_region", "trust_region_clipped"])
def test_update_matches_the_numpy_reference(trust_region, grad_norm):
    gamma, c, delta, alpha, lr = 0.9, 10.0, 0.3, 0.8, 0.1
    agent = ACER(make_envs("CartPole-v1", n_envs=N, seed=0), model=TINY_MLP, buffer=RolloutBuffer(max_size=100),
                 seed=0, n_steps=T, gamma=gamma, importance_c=c, delta=delta, ema_alpha=alpha, replay_ratio=0,
                 trust_region=trust_region, grad_norm=grad_norm, entropy_coef=0.05, value_loss_coef=0.7)
    rng = np.random.default_rng(1)  # an average policy away from the current one
    agent.average.set_weights([w + rng.normal(scale=0.5, size=w.shape).astype(np.float32)
                               for w in agent.model.get_weights()])
    use_sgd(agent, lr)
    batch = hand_built_rollout()
    flat_obs = tf.constant(np.concatenate([batch["obs"], batch["last_obs"][None]]).reshape(-1, 4))
    variables = agent.model.trainable_variables
    model_before, average_before = [v.numpy().copy() for v in variables], weights(agent.average)

    # the reference, from the model's own outputs on this batch
    with tf.GradientTape() as tape:
        logits, q = agent.model(flat_obs)
    average_logits = agent.average(flat_obs)[0].numpy().astype(np.float64).reshape(T + 1, N, 2)
    ref = acer_reference(logits.numpy().astype(np.float64).reshape(T + 1, N, 2),
                         q.numpy().astype(np.float64).reshape(T + 1, N, 2), average_logits, batch["actions"],
                         batch["rewards"].astype(np.float64), batch["dones"].astype(np.float64),
                         batch["mu"].astype(np.float64), gamma=gamma, c=c, delta=delta, entropy_coef=0.05,
                         value_coef=0.7, trust_region=trust_region)
    # the rollout exercises truncation of the taken action's weight, bias correction of untaken actions, and
    # (for the trust region) rows inside and outside the region
    assert (ref["rho_a"] > c).any() and (ref["rho_a"] < c).any()
    untaken = np.eye(2)[1 - batch["actions"]].astype(bool)
    assert (ref["rho"][untaken] > c).any()
    assert (ref["k_dot_g"] > delta).any() and (ref["k_dot_g"] < delta).any()
    # the network's chain rule for the reference's output gradients
    grads = tape.gradient([logits, q], variables, output_gradients=[
        tf.constant(ref["d_logits"].reshape(-1, 2), tf.float32), tf.constant(ref["d_q"].reshape(-1, 2), tf.float32)])
    grads = [g.numpy().astype(np.float64) for g in grads]
    norm = np.sqrt(sum(np.sum(g * g) for g in grads))
    if grad_norm is not None:
        assert norm > grad_norm  # clipping is active
        grads = [g * grad_norm / norm for g in grads]

    metrics = tf.function(agent.update)({k: tf.constant(v) for k, v in batch.items()})
    for key in ("policy_loss", "value_loss", "entropy"):
        np.testing.assert_allclose(float(metrics[key]), ref[key], rtol=2e-4, atol=1e-6, err_msg=key)
    differ = [var.path for before, grad, var in zip(model_before, grads, variables)
              if not np.allclose(before - var.numpy(), lr * grad, rtol=2e-3, atol=2e-6)]
    assert not differ, f"the update's gradients differ from the reference's for {differ}"
    # EMA: average <- alpha * average + (1 - alpha) * model, after the model's update
    for avg_before, avg_after, model_after in zip(average_before, weights(agent.average), weights(agent.model)):
        np.testing.assert_allclose(avg_after, alpha * avg_before + (1 - alpha) * model_after, rtol=1e-5, atol=1e-6)
    assert agent.buffer.count == 1  # the rollout was stored for replay; replay_ratio=0 replays none now
    np.testing.assert_array_equal(agent.buffer.data["mu"][0], batch["mu"])

