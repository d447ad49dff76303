from django.apps import AppConfig
from django.db.models.signals import post_migrate


class BookingsConfig(AppConfig):
    name = "bookings"
    verbose_name = "Calendars, holds and bookings"

    def ready(self) -> None:
        from agentcal.local_cache import watch
        from bookings.engine.functions import create_functions
        from bookings.models import Calendar

        # The SQL functions the engine's statements call, as this code writes them, after every migrate.
        post_migrate.connect(create_functions, sender=self, dispatch_uid="bookings.create_functions")

        # Every process keeps copies of calendar settings for the write path (bookings/engine/calendars.py).
        watch(Calendar)
