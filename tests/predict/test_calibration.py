"""Calibration data: fitting recorded statistics, composing settings, the study's format."""

from __future__ import annotations

import math

import pytest

from tritontune.config.model_config import parse_config_text
from tritontune.predict.batcher import CLIENT_JITTER, BatcherConfig, ClosedLoop, ServiceCurve, simulate
from tritontune.predict.calibration import (
    BatchPoint,
    Calibration,
    Derivation,
    LoadLevel,
    SettingCalibration,
    contention,
    execution_setting,
    fit_cv,
    fit_points,
    knob_settings,
    lognormal_cv,
    precision_settings,
    setting_key,
    settings_to_calibrate,
)
from tritontune.predict.config import batcher_config_of


def setting(instances: int, threads: int = 1, points=((1, 0.002), (8, 0.008))) -> SettingCalibration:
    return SettingCalibration(
        {"instance_count": instances, "intra_op_thread_count": threads},
        tuple(BatchPoint(b, m, 10) for b, m in points),
        cv=0.1,
        overhead_s=0.0005,
    )


def test_recorded_statistics_pool_by_batch_size_and_drop_rare_sizes():
    # (batch size, executions, compute seconds in all) from three levels
    samples = [(1, 40, 0.08), (2, 1, 0.003), (1, 10, 0.02), (8, 5, 0.04), (8, 5, 0.05)]
    points = fit_points(samples)
    assert [(p.batch_size, p.executions) for p in points] == [(1, 50), (8, 10)]
    assert points[0].mean_s == pytest.approx(0.002)
    assert points[1].mean_s == pytest.approx(0.009)


def test_sizes_pool_into_power_of_two_bands_and_a_larger_batch_never_takes_less():
    samples = [(3, 10, 0.030), (4, 30, 0.120), (5, 10, 0.050), (8, 10, 0.020)]
    points = fit_points(samples)
    # 3-4 pooled at their mean size 3.75 -> 4; 5-8 is faster than 3-4 (noise): pooled with it
    assert [(p.batch_size, p.executions) for p in points] == [(5, 60)]
    assert points[0].mean_s == pytest.approx(0.220 / 60)
    rising = fit_points([(1, 10, 0.01), (2, 10, 0.015), (16, 10, 0.1)])
    assert [p.batch_size for p in rising] == [1, 2, 16]


def calibration_levels(cv: float, loads: tuple[int, ...], seed: int) -> list[LoadLevel]:
    """What calibration levels of a server whose executions spread by ``cv`` would measure
    (the batcher model as the server, with other random draws than the fit's)."""
    curve = ServiceCurve({1: (0.020, 0.020 * cv), 4: (0.050, 0.050 * cv)})
    config = BatcherConfig(max_batch_size=8, dynamic_batching=True, instances=2)
    levels = []
    for load in loads:
        run = simulate(
            curve,
            config,
            ClosedLoop(load),
            n_requests=4000,
            overhead_s=0.001,
            jitter=CLIENT_JITTER,
            seed=seed,
        )
        levels.append(LoadLevel(load, run.p50_s, run.p99_s))
    return levels


@pytest.mark.parametrize("truth", [0.0, 0.3, 0.6])
def test_the_spread_is_fitted_to_the_levels_p99(truth):
    points = (BatchPoint(1, 0.020, 50), BatchPoint(4, 0.050, 50))
    levels = calibration_levels(truth, (1, 2, 8), seed=7)
    cv = fit_cv(points, levels, instances=2, max_batch_size=8, overhead_s=0.001)
    assert cv == pytest.approx(truth, abs=0.1)


def test_the_spread_fit_leaves_out_levels_past_the_slo_and_with_idle_instances():
    points = (BatchPoint(1, 0.020, 50), BatchPoint(4, 0.050, 50))
    levels = calibration_levels(0.3, (2, 3), seed=7)
    # A level whose queue ran away (10 s p99 under a 50 ms SLO) would pull the fit to the top;
    # one request at a time on 2 instances (no tail: a core to spare) would pull it to 0.
    others = [*levels, LoadLevel(64, 1.0, 10.0), LoadLevel(1, 0.021, 0.0211)]
    fitted = fit_cv(points, others, instances=2, max_batch_size=8, overhead_s=0.001, slo_p99_s=0.05)
    assert fitted == pytest.approx(0.3, abs=0.1)
    assert fit_cv(points, others[-1:], instances=2, max_batch_size=8, overhead_s=0.001) == pytest.approx(
        lognormal_cv(0.021, 0.0211)
    )
    assert fit_cv(points, [], instances=2, max_batch_size=8, overhead_s=0.001) == 0.0


def test_the_spread_is_never_below_the_concurrency_1_levels():
    """The levels' batches mix sizes, and the model can match their p99 with the mix alone (VGG16
    was fitted at 0 against 0.14 at concurrency 1, and its p99 came out 44-51 % too low)."""
    points = (BatchPoint(1, 0.020, 50), BatchPoint(4, 0.050, 50))
    steady = [*calibration_levels(0.0, (2, 3), seed=7), LoadLevel(1, 0.02, 0.06)]
    fitted = fit_cv(points, steady, instances=2, max_batch_size=8, overhead_s=0.001)
    assert fitted == pytest.approx(lognormal_cv(0.02, 0.06)) and 0.45 < fitted < 0.55


def test_the_concurrency_1_spread_is_a_lognormal_fitted_to_its_tail():
    sigma = 0.3
    p50, p99 = 0.01, 0.01 * math.exp(2.3263 * sigma)
    assert lognormal_cv(p50, p99) == pytest.approx(math.sqrt(math.exp(sigma**2) - 1), rel=1e-3)
    assert lognormal_cv(0.01, 0.01) == 0.0  # no tail: deterministic


def test_a_calibration_keeps_its_levels_latencies_in_the_study():
    calibrated = SettingCalibration(
        {"instance_count": 2},
        (BatchPoint(1, 0.02, 10),),
        cv=0.3,
        overhead_s=0.001,
        latencies=(LoadLevel(1, 0.021, 0.030), LoadLevel(2, 0.022, 0.040)),
    )
    assert SettingCalibration.from_dict(calibrated.to_dict()) == calibrated
    older = {k: v for k, v in calibrated.to_dict().items() if k != "latencies"}
    assert SettingCalibration.from_dict(older).latencies == ()


def test_one_knob_at_a_time_and_composition():
    plan = settings_to_calibrate(
        {"instance_count": 1, "intra_op_thread_count": 1},
        {"instance_count": (1, 2), "intra_op_thread_count": (1, 2, 4)},
    )
    assert len(plan) == 4  # reference, 2 instances, 2 threads, 4 threads (not 2 x 3 = 6)
    calibration = Calibration({"instance_count": 1, "intra_op_thread_count": 1})
    calibration.add(setting(1))
    calibration.add(setting(2, points=((1, 0.003), (8, 0.016))))  # contention: 1.5x .. 2x
    calibration.add(setting(1, threads=2, points=((1, 0.002), (8, 0.004))))  # threads help big batches
    own = calibration.predict({"instance_count": 2, "intra_op_thread_count": 1})
    assert own.measured and own.curve.mean(8) == pytest.approx(0.016)
    composed = calibration.predict({"instance_count": 2, "intra_op_thread_count": 2})
    assert not composed.measured and len(composed.sources) == 3
    assert composed.curve.mean(1) == pytest.approx(0.003)  # 0.002 x 1.5 x 1.0
    assert composed.curve.mean(8) == pytest.approx(0.008)  # 0.008 x 2.0 x 0.5
    with pytest.raises(KeyError, match="intra_op_thread_count"):
        calibration.predict({"instance_count": 1, "intra_op_thread_count": 4})


def precise(precision: str, level: str, factor: float, instances: int = 1) -> SettingCalibration:
    return SettingCalibration(
        {"instance_count": instances, "precision": precision, "graph_optimization": level},
        (BatchPoint(1, 0.010 * factor, 10), BatchPoint(8, 0.040 * factor, 10)),
        cv=0.1,
        overhead_s=0.0005,
    )


def test_precisions_first_then_every_other_knob_in_the_fastest_one():
    reference = {"instance_count": 1, "precision": "fp32", "graph_optimization": "all"}
    values = {
        "instance_count": (1, 2),
        "precision": ("fp32", "fp16", "int8_static"),
        "graph_optimization": ("all", "basic", "extended"),
    }
    home = {**reference, "precision": "int8_static"}
    assert precision_settings(reference, values) == [
        reference, {**reference, "precision": "fp16"}, home,
    ]  # fmt: skip
    calibration = Calibration(reference)
    calibration.add(precise("fp32", "all", 1.0))
    assert calibration.fastest_precision() == "fp32"  # nothing faster calibrated yet
    calibration.add(precise("fp16", "all", 0.9))
    calibration.add(precise("int8_static", "all", 0.25))
    assert calibration.fastest_precision() == "int8_static"
    assert knob_settings(calibration, values) == [
        {**home, "instance_count": 2},
        {**home, "graph_optimization": "basic"},
        {**home, "graph_optimization": "extended"},
    ]
    calibration.add(precise("int8_static", "basic", 2.0))  # the integer kernels need fusions
    calibration.add(precise("int8_static", "all", 0.2, instances=2))  # INT8 instances: 0.8x
    slow = {**home, "graph_optimization": "basic", "instance_count": 2}
    composed = calibration.predict(slow)
    assert composed.derivation == Derivation.COMPOSED
    # around its home: 0.25 x (2.0 / 0.25) x (0.2 / 0.25)
    assert composed.curve.mean(1) == pytest.approx(0.010 * 2.0 * 0.8)
    basic, two = {**home, "graph_optimization": "basic"}, {**home, "instance_count": 2}
    assert composed.sources == tuple(setting_key(s) for s in (home, two, basic))
    # another precision is composed around its own home with the fastest one's ratios
    fp16 = calibration.predict({**reference, "precision": "fp16", "graph_optimization": "basic"})
    assert fp16.curve.mean(1) == pytest.approx(0.010 * 0.9 * 8.0)
    # a knob calibrated in the reference's precision too: its own ratio first
    calibration.add(precise("fp32", "basic", 1.1))
    fp32 = calibration.predict({**reference, "graph_optimization": "basic", "instance_count": 2})
    assert fp32.curve.mean(1) == pytest.approx(0.010 * 1.1 * 0.8)
    with pytest.raises(KeyError, match="extended"):
        calibration.predict({**home, "graph_optimization": "extended"})
    # without a precision dimension the knobs are calibrated around the reference
    plain = Calibration({"instance_count": 1})
    plain.add(setting(1))
    assert knob_settings(plain, {"instance_count": (1, 2)}) == [{"instance_count": 2}]


def test_the_fastest_precisions_joint_split_anchors_every_precisions_oversubscribed_settings():
    reference = {"instance_count": 1, "intra_op_thread_count": 1, "precision": "fp32"}
    values = {"instance_count": (1, 2), "intra_op_thread_count": (1, 2), "precision": ("fp32", "int8")}
    calibration = Calibration(reference, cores=2)
    joint = calibration.joint_setting(values, max_threads=4)
    assert joint == {**reference, "instance_count": 2, "intra_op_thread_count": 2}
    home = {**reference, "precision": "int8"}
    for instances, threads, precision, factor in (
        (1, 1, "fp32", 1.0), (1, 1, "int8", 0.3), (2, 1, "int8", 0.3), (1, 2, "int8", 0.2),
    ):  # fmt: skip
        calibration.add(
            SettingCalibration(
                {"instance_count": instances, "intra_op_thread_count": threads, "precision": precision},
                (BatchPoint(1, 0.010 * factor, 10), BatchPoint(8, 0.040 * factor, 10)),
                cv=0.1,
                overhead_s=0.0005,
            )
        )
    assert knob_settings(calibration, values, joint)[-1] == {**joint, "precision": "int8"}
    split = {**home, "instance_count": 2, "intra_op_thread_count": 2}
    before = calibration.predict(split)
    assert before.derivation == Derivation.CONTENTION  # modelled until the split is calibrated
    calibration.add(SettingCalibration(split, (BatchPoint(1, 0.005, 10),), cv=0.1, overhead_s=0.0005))
    assert calibration.predict(split).measured
    # FP32 at that split: INT8's split times FP32's ratio to INT8 (1 / 0.3)
    fp32 = calibration.predict({**split, "precision": "fp32"})
    assert fp32.derivation == Derivation.COMPOSED
    assert fp32.curve.mean(1) == pytest.approx(0.005 / 0.3)


def test_the_study_format_reads_back():
    calibration = Calibration({"instance_count": 1})
    calibration.add(setting(1))
    again = Calibration.from_dict(calibration.to_dict())
    assert again.to_dict() == calibration.to_dict()
    assert again.has({"instance_count": 1, "intra_op_thread_count": 1})


def test_execution_setting_keeps_only_what_changes_service_time():
    point = {"max_batch_size": 8, "instance_count": 2, "precision": "fp16", "max_queue_delay": 100}
    assert execution_setting(point) == {"instance_count": 2, "precision": "fp16"}


def test_a_config_as_the_batcher_sees_it():
    config = parse_config_text(
        """
        name: "m" max_batch_size: 16
        instance_group [{count: 2 kind: KIND_CPU}, {count: 1 kind: KIND_CPU}]
        dynamic_batching {
          max_queue_delay_microseconds: 2000 preferred_batch_size: [4, 16]
          priority_levels: 2 default_priority_level: 2
          default_queue_policy {
            max_queue_size: 8 default_timeout_microseconds: 50000 timeout_action: DELAY
          }
        }
        """
    )
    batcher = batcher_config_of(config)
    assert (batcher.max_batch_size, batcher.instances, batcher.max_queue_delay_s) == (16, 3, 0.002)
    assert batcher.preferred_batch_sizes == (4, 16) and batcher.priority_levels == 2
    assert batcher.max_queue_size == 8 and batcher.default_timeout_s == 0.05
    assert str(batcher.timeout_action) == "delay"
    plain = batcher_config_of(parse_config_text('name: "m" max_batch_size: 8'))
    assert not plain.batching and plain.instances == 1


def threaded(instances: int, threads: int, truth) -> SettingCalibration:
    """A calibration measured on a machine whose truth is ``truth(instances, threads, batch)``."""
    return SettingCalibration(
        {"instance_count": instances, "intra_op_thread_count": threads},
        tuple(BatchPoint(b, truth(instances, threads, b), 10) for b in (1, 4, 16)),
        cv=0.1,
        overhead_s=0.0005,
    )


def shared_cores(instances: int, threads: int, batch: int, cores: int = 2, alpha: float = 1.7) -> float:
    """Instances and threads on ``cores`` cores: threads speed one execution up by
    ``threads ** 0.8``, and executions stretch by ``(busy cores asked / cores) ** alpha``
    past the cores (onnxruntime's spinning threads: worse than fair time-slicing)."""
    busy = threads**0.8
    return 0.001 * batch / busy * max(1.0, instances * busy / cores) ** alpha


def test_instances_and_threads_that_share_the_cores_are_not_multiplied_as_if_independent():
    reference = {"instance_count": 1, "intra_op_thread_count": 1}
    values = {"instance_count": (1, 2, 4), "intra_op_thread_count": (1, 2)}
    calibration = Calibration(reference, cores=2)
    # the joint setting: the most instances with the most threads the limit allows
    assert calibration.joint_setting(values, max_threads=8) == {
        "instance_count": 4,
        "intra_op_thread_count": 2,
    }
    assert calibration.joint_setting(values, max_threads=4) == {
        "instance_count": 2,
        "intra_op_thread_count": 2,
    }
    assert calibration.joint_setting(values, max_threads=2) is None  # nothing oversubscribes
    assert Calibration(reference).joint_setting(values, max_threads=8) is None  # cores unknown
    joint = calibration.joint_setting(values, max_threads=8)
    plan = settings_to_calibrate(reference, values, joint)
    assert len(plan) == 5 and plan[-1] == joint
    for one in plan[:-1]:
        calibration.add(threaded(one["instance_count"], one["intra_op_thread_count"], shared_cores))

    wanted = {"instance_count": 2, "intra_op_thread_count": 2}
    truth = shared_cores(2, 2, 16)
    # before the joint setting is measured: fair time-slicing (alpha 1), already far closer to
    # the truth than the product of the one-knob ratios
    independent = Calibration(reference)  # cores unknown: composed as before
    independent.settings = dict(calibration.settings)
    composed = independent.predict(wanted)
    assert composed.derivation == Derivation.COMPOSED
    assert composed.curve.mean(16) < 0.7 * truth  # the 2.5x-too-fast composition
    modelled = calibration.predict(wanted)
    assert modelled.derivation == Derivation.CONTENTION and not modelled.measured
    assert calibration.alpha() == (1.0, None)
    assert modelled.curve.mean(16) == pytest.approx(truth, rel=0.35)
    # the joint calibration fits alpha, and the fitted model predicts the other oversubscribed
    # settings it was not measured at
    calibration.add(threaded(4, 2, shared_cores))
    alpha, fitted_on = calibration.alpha()
    assert alpha == pytest.approx(1.7, abs=0.05) and fitted_on is not None
    refined = calibration.predict(wanted)
    assert refined.curve.mean(16) == pytest.approx(truth, rel=0.05)
    assert fitted_on in refined.sources
    # a setting that doesn't oversubscribe is left as composed (no stretch)
    assert contention(1, 1.7, 1, 1.0, 2) == 1.0
    # other knobs compose on the calibrated joint setting of their instances and threads
    calibration.add(
        SettingCalibration(
            {**reference, "precision": "int8"},
            tuple(BatchPoint(b, 0.5 * shared_cores(1, 1, b), 10) for b in (1, 4, 16)),
            cv=0.1,
            overhead_s=0.0005,
        )
    )
    int8 = calibration.predict({**joint, "precision": "int8"})
    assert int8.derivation == Derivation.COMPOSED
    assert int8.curve.mean(16) == pytest.approx(0.5 * shared_cores(4, 2, 16), rel=0.01)
    again = Calibration.from_dict(calibration.to_dict())
    assert again.cores == 2 and again.alpha() == calibration.alpha()
