"""The provider's Airflow UI plugin: the Joins view (:mod:`.joins_view`)."""
