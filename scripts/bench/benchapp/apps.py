from django.apps import AppConfig


class BenchAppConfig(AppConfig):
    name = "benchapp"
    label = "benchapp"
