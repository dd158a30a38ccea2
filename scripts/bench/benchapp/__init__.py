"""The benchmark's job type for this project, installed through JOBSITE_EXTRA_APPS."""
