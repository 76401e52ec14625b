"""Windowed joins: stream mode, the self-join (a stream-mode join of a table with itself) and table mode.

A ``windowed_join`` spec is refreshed by one of four classes, picked where every kind's is
(:meth:`..JoinKind.refresh_for`, by each class's ``serves``): ``mode: table`` runs :mod:`.table` (as a
foreign-key join for ``how: inner``/``left``, else the outer join); ``mode: stream`` runs :mod:`.stream`,
or :mod:`.self_join`'s one-store computation when both sides are the same table (unless
``optimize: false``).

>>> refresh = KINDS["windowed_join"].refresh_for(load_spec("clicks_x_views.yaml"), spark)
>>> refresh_once(refresh, options)["optimized"]
'self_join'
"""
