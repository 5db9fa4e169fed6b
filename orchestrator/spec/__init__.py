"""The job file: a SkyPilot-style task YAML plus orch's own keys, validated strictly.

`load_spec` / `load_spec_text` give a JobSpec or one SpecError naming the file, line and
key. The parts: base (strict models, free-form values), resources, cron, sections (orch's
keys), job (JobSpec), document (reading the YAML safely), load (validation and messages).
"""

from orchestrator.spec.base import TARGETS, Strict, Target
from orchestrator.spec.document import MAX_BYTES, MAX_DEPTH, MAX_VALUES, SourceMap
from orchestrator.spec.job import JobSpec
from orchestrator.spec.load import load_spec, load_spec_text
from orchestrator.spec.overrides import Overrides, overrides
from orchestrator.spec.resources import AcceleratorChoice, Resources, parse_accelerator, quantity_min
from orchestrator.spec.sections import (
    AutoBool,
    AutoCount,
    BudgetSection,
    Checkpoint,
    Data,
    EstimateSection,
    PlacementSection,
    Scaling,
    ScheduleSection,
    Train,
    UtilizationPolicy,
)

__all__ = [
    "MAX_BYTES", "MAX_DEPTH", "MAX_VALUES", "TARGETS", "AcceleratorChoice", "AutoBool", "AutoCount",
    "BudgetSection", "Checkpoint", "Data", "EstimateSection", "JobSpec", "Overrides", "PlacementSection", "Resources", "Scaling",
    "ScheduleSection", "SourceMap", "Strict", "Target", "Train", "UtilizationPolicy", "load_spec", "load_spec_text", "overrides",
    "parse_accelerator", "quantity_min",
]
