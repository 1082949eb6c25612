"""Put on the workers' PYTHONPATH by the launcher: holds only ``sitecustomize``."""
