"""edv-ray: Execute-Distill-Verify experience learning on Ray."""
__version__ = "0.1.0"
