"""orch's settings: `ORCH_*` environment variables over a TOML file over defaults.

The file is `ORCH_CONFIG`, default `~/.config/orch/config.toml`. Settings are an object
passed to whoever needs them, never a module global. The parts: hardware (the owned and
candidate GPUs, this workstation), model (Settings), load (the file, the environment and
their error messages).
"""

from orchestrator.settings.hardware import BuyCandidate, LocalMachine, OwnedGpus
from orchestrator.settings.load import DEFAULT_CONFIG, MAX_BYTES, config_path, load_settings
from orchestrator.settings.model import Settings

__all__ = ["DEFAULT_CONFIG", "MAX_BYTES", "BuyCandidate", "LocalMachine", "OwnedGpus", "Settings",
           "config_path", "load_settings"]
