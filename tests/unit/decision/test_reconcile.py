"""Reconcile as a table: a job's record, what is known of its backend, and now -> the step."""

from __future__ import annotations

import pytest

from orchestrator.decision.reconcile import ADOPTED, NEVER_LAUNCHED, Step, launched, unlaunched

GRACE, CLOUD = 60.0, 600.0


@pytest.mark.parametrize("age, sub_gone, backend_gone, knows, launch_grace, want", [
    (10, False, False, None, 0, Step("keep")),  # its submit lives and may still be launching
    (10, False, True, None, 0, Step("keep")),  # ... even with its backend gone: not yet asked
    (120, False, False, None, 0, Step("ask")),  # past the grace: ask the backend
    (10, True, False, None, 0, Step("ask")),  # its submit died: ask at once
    (10, True, True, None, 0, Step("fail", "FAILED", NEVER_LAUNCHED)),  # the local Ray is gone too
    (120, False, False, True, 0, Step("adopt", message=ADOPTED)),  # the backend has it
    (120, False, False, False, 0, Step("fail", "FAILED", NEVER_LAUNCHED)),
    (120, True, False, False, CLOUD, Step("keep")),  # a cloud launch may still be queuing
    (700, True, False, False, CLOUD, Step("fail", "FAILED", NEVER_LAUNCHED)),
    (700, True, False, True, CLOUD, Step("adopt", message=ADOPTED)),
])
def test_a_job_that_was_never_given_a_backend_id(age, sub_gone, backend_gone, knows, launch_grace, want):
    assert unlaunched(age_s=age, submitter_gone=sub_gone, backend_gone=backend_gone,
                      backend_knows=knows, grace_s=GRACE, launch_grace_s=launch_grace) == want


@pytest.mark.parametrize("gone, status, cancel, budget, want", [
    ("the local Ray instance stopped", None, False, None,
     Step("finish", "FAILED", "the local Ray instance stopped")),
    (None, None, False, None, Step("ask")),
    (None, "PENDING", False, None, Step("keep")),
    (None, "RUNNING", False, None, Step("running", "RUNNING", "msg")),
    (None, "SUCCEEDED", False, None, Step("finish", "SUCCEEDED", "msg")),
    (None, "FAILED", False, None, Step("finish", "FAILED", "msg")),
    (None, "SUCCEEDED", True, None, Step("finish", "CANCELLED", "msg")),  # a cancel ends as a stop
    (None, "FAILED", True, "stopped at its budget", Step("finish", "CANCELLED", "stopped at its budget")),
    (None, "CANCELLED", False, None, Step("finish", "CANCELLED", "msg")),
])
def test_a_launched_job_by_what_its_backend_says(gone, status, cancel, budget, want):
    assert launched(gone=gone, backend_status=status, backend_message="msg", cancel_requested=cancel,
                    budget_stop=budget) == want
