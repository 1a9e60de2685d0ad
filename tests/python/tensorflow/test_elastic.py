"""hvd.elastic for TensorFlow, its pieces in a job that keeps its ranks
(run_elastic_tf_test.py kills one): TensorFlowState (eagerly and in a v1 graph) and
TensorFlowKerasState commit, restore and sync rank 0's values; ObjectState; run()'s reset loop
and the errors it lets through."""

import numpy as np
import pytest
import tensorflow as tf

import troika.tensorflow as hvd


def test_the_module_exports_horovods_names():
    assert set(hvd.elastic.__all__) == {"run", "State", "ObjectState", "TensorFlowState",
                                        "TensorFlowKerasState", "HostsUpdatedInterrupt"}


def test_tensorflow_state_syncs_rank_0s_values_restores_and_commits():
    v = 1.0 if hvd.rank() == 0 else 2.0
    variables = [tf.Variable(np.full([2, 2], v)), tf.Variable(np.full([2], v))]
    state = hvd.elastic.TensorFlowState(variables, batch=20 + hvd.rank(), epoch=10 + hvd.rank())
    state.sync()
    for var in variables:
        np.testing.assert_array_equal(var.numpy(), np.ones(var.shape))
    assert (state.batch, state.epoch) == (20, 10)

    changed = [np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([0.0, 5.0])]
    for var, value in zip(variables, changed):
        var.assign(value)
    state.batch, state.epoch = 21, 11
    state.restore()
    for var in variables:
        np.testing.assert_array_equal(var.numpy(), np.ones(var.shape))
    assert (state.batch, state.epoch) == (20, 10)

    for var, value in zip(variables, changed):
        var.assign(value)
    state.batch, state.epoch = 21, 11
    state.commit()
    state.restore()
    for var, value in zip(variables, changed):
        np.testing.assert_array_equal(var.numpy(), value)
    assert (state.batch, state.epoch) == (21, 11)


def test_tensorflow_state_needs_its_variables_eagerly():
    with pytest.raises(ValueError, match="variables"):
        hvd.elastic.TensorFlowState()


def test_tensorflow_state_in_a_v1_graph_with_its_session():
    with tf.Graph().as_default():
        v = tf.compat.v1.get_variable("v", initializer=[float(hvd.rank())] * 2)
        add_one = v.assign_add([1.0, 1.0])
        with tf.compat.v1.Session() as sess:
            sess.run(v.initializer)
            state = hvd.elastic.TensorFlowState(session=sess, step=hvd.rank())
            assert state.variables == [v]
            state.sync()
            np.testing.assert_array_equal(sess.run(v), [0.0, 0.0])
            assert state.step == 0
            sess.run(add_one)
            state.restore()
            np.testing.assert_array_equal(sess.run(v), [0.0, 0.0])
            sess.run(add_one)
            state.step = 1
            state.commit()
            sess.run(add_one)
            state.restore()
            np.testing.assert_array_equal(sess.run(v), [1.0, 1.0])
            assert state.step == 1


def make_model(seed):
    tf.keras.utils.set_random_seed(seed)
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(4),
                                 tf.keras.layers.Dense(1)])
    return model, tf.keras.optimizers.SGD(0.1, momentum=0.9)


def train_step(model, opt):
    x = tf.ones([2, 3]) * float(hvd.rank() + 1)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x)))
    tape = hvd.DistributedGradientTape(tape)
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                            model.trainable_variables))


def values(variables):
    return [np.array(v.numpy()) for v in variables]


def optimizer_variables(opt):
    return list(opt.variables() if callable(opt.variables) else opt.variables)


def test_keras_state_syncs_rank_0s_model_and_optimizer_and_restores_its_commit():
    model, opt = make_model(seed=hvd.rank())  # different weights on every rank
    state = hvd.elastic.TensorFlowKerasState(model, opt, batch=hvd.rank())
    # The optimizer is built (its momentum variables made) so that every rank syncs them.
    slots = len(optimizer_variables(opt))
    assert slots > 2
    train_step(model, opt)  # rank 0's momentum to sync below
    state.sync()
    for v in model.variables + optimizer_variables(opt):
        for other in hvd.allgather_object(v.numpy()):
            np.testing.assert_array_equal(other, v.numpy())
    assert state.batch == 0
    committed = values(model.variables + optimizer_variables(opt))
    train_step(model, opt)
    state.batch = 5
    state.restore()
    for v, c in zip(model.variables + optimizer_variables(opt), committed):
        np.testing.assert_array_equal(v.numpy(), c)
    assert state.batch == 0
    train_step(model, opt)
    state.commit()
    after = values(model.variables)
    train_step(model, opt)
    state.restore()
    for v, c in zip(model.variables, after):
        np.testing.assert_array_equal(v.numpy(), c)
    assert len(optimizer_variables(opt)) == slots


def test_keras_state_wants_a_built_model():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    with pytest.raises(ValueError, match="built"):
        hvd.elastic.TensorFlowKerasState(model, tf.keras.optimizers.SGD())


def test_object_state_syncs_with_tensorflows_broadcast():
    state = hvd.elastic.ObjectState(epoch=hvd.rank(), seen=[hvd.rank()])
    state.sync()
    assert (state.epoch, state.seen) == (0, [0])


def test_run_resets_on_hosts_updated_and_lets_other_errors_through():
    state = hvd.elastic.ObjectState(calls=0)
    resets = []
    state.register_reset_callbacks([lambda: resets.append(hvd.size())])

    @hvd.elastic.run
    def train(state, value):
        state.calls += 1
        if state.calls == 1:
            raise hvd.elastic.HostsUpdatedInterrupt(skip_sync=True)
        return value + hvd.rank()

    assert train(state, 10) == 10 + hvd.rank()
    assert state.calls == 2
    assert resets == [hvd.size()]

    @hvd.elastic.run
    def mismatch(state):
        hvd.allreduce(tf.ones([1 + hvd.rank()]), name="elastic.mismatch")

    with pytest.raises(tf.errors.FailedPreconditionError, match="Mismatched"):
        mismatch(state)
    assert resets == [hvd.size()]  # no reset for an error that is not a membership change
    np.testing.assert_array_equal(hvd.allreduce(tf.ones([1]), name="elastic.after").numpy(),
                                  [1.0])  # the job goes on
