"""The decision core: classify a job, price each place it could run, choose one. No I/O."""

from orchestrator.decision.classify import classify
from orchestrator.decision.cost import HoursEstimator, job_cost
from orchestrator.decision.models import Alternative, Capacity, Classification, Decision, Offer, PastRun
from orchestrator.decision.placement import OfferIndex, decide

__all__ = ["Alternative", "Capacity", "Classification", "Decision", "HoursEstimator", "Offer",
           "OfferIndex", "PastRun", "classify", "decide", "job_cost"]
