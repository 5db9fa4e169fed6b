"""Where jobs run: this workstation's Ray, an on-prem Ray cluster, or a cloud via SkyPilot."""
