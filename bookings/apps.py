from django.apps import AppConfig


class BookingsConfig(AppConfig):
    name = "bookings"
    verbose_name = "Calendars, holds and bookings"

    def ready(self) -> None:
        from agentcal.local_cache import watch
        from bookings.models import Calendar

        # Every process keeps copies of calendar settings for the write path (bookings/engine/calendars.py).
        watch(Calendar)
