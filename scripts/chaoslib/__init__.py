"""The parts of the chaos run (scripts/chaos.py): stores, processes, schedule, faults, clients, checks."""
