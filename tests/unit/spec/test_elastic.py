"""Elastic train jobs: `scaling.num_workers: {min, max}` is read, placed and queued by its
`min`, and handed to Ray Train as an elastic ScalingConfig whose policy counts what the
cluster has free (the integration test grows one on a real local Ray)."""

from __future__ import annotations

import pytest

from orchestrator.base.errors import SpecError
from orchestrator.decision.demand import job_demand
from orchestrator.spec import load_spec_text

JOB = "name: e\ntrain: {job: image-classification}\nscaling:\n  num_workers: {min: 2, max: 8}\n"


def test_min_and_max_are_read_and_the_job_holds_its_min():
    spec = load_spec_text(JOB, "e.yaml")
    assert (spec.scaling.min_workers, spec.scaling.max_workers, spec.scaling.elastic) == (2, 8, True)
    assert job_demand(spec).cpus == job_demand(load_spec_text(
        JOB.replace("{min: 2, max: 8}", "2"), "e.yaml")).cpus
    stored = spec.model_dump(mode="json")  # as a record keeps it: the queue reads it so too
    assert stored["scaling"]["num_workers"] == {"min": 2, "max": 8}
    assert job_demand(stored).cpus == job_demand(spec).cpus
    fixed = load_spec_text(JOB.replace("{min: 2, max: 8}", "{min: 3, max: 3}"), "e.yaml")
    assert not fixed.scaling.elastic and fixed.scaling.max_workers == 3


@pytest.mark.parametrize("value,problem", [("{min: 4, max: 2}", "min (4) is more than max (2)"),
                                           ("{min: 0, max: 2}", "greater than 0"),
                                           ("{max: 2}", "min")])
def test_a_bad_range_is_refused_at_its_line(value, problem):
    with pytest.raises(SpecError) as e:
        load_spec_text(JOB.replace("{min: 2, max: 8}", value), "e.yaml")
    assert e.value.line == 4 and e.value.key.startswith("scaling.num_workers"), e.value.message
    assert problem in e.value.message


def test_the_runner_asks_ray_train_for_an_elastic_run_sized_from_what_is_free():
    from ray.train import ScalingConfig

    from jobs.elastic import ELASTIC_LOOK_S, sized_from_free
    from jobs.elastic import scaling_config as _scaling
    from jobs.request import RunRequest

    elastic = _scaling(ScalingConfig, RunRequest(job_id="j", target="t", num_workers=2,
                                                 max_workers=8), False)
    assert (elastic.min_workers, elastic.max_workers) == (2, 8)
    assert elastic.elastic_resize_monitor_interval_s == ELASTIC_LOOK_S
    fixed = _scaling(ScalingConfig, RunRequest(job_id="j", target="t", num_workers=2), False)
    assert fixed.num_workers == 2
    from ray.train.v2._internal.execution.scaling_policy.elastic import ElasticScalingPolicy

    policy = sized_from_free(ElasticScalingPolicy(elastic))
    assert isinstance(policy, ElasticScalingPolicy) and type(policy) is not ElasticScalingPolicy
    with pytest.raises(Exception, match="max_workers"):
        RunRequest(job_id="j", target="t", num_workers=4, max_workers=2)._check()
