"""The decision core: classify a job, price each place it could run, choose one. No I/O."""

from orchestrator.decision.classify import classify
from orchestrator.decision.models import Alternative, Capacity, Classification, Decision, Offer, PastRun
from orchestrator.decision.placement import OfferIndex, decide
from orchestrator.decision.pricing import HoursEstimator, job_cost

__all__ = ["Alternative", "Capacity", "Classification", "Decision", "HoursEstimator", "Offer",
           "OfferIndex", "PastRun", "classify", "decide", "job_cost"]
