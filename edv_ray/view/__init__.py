"""``edv view``: a read-only local web viewer (and a static export) over run folders.

``queries.py`` (+ ``queries_item.py``) read the run's DuckDB views
(:func:`edv_ray.results.views.connect`), paginated in SQL; ``app.py`` serves them with
Starlette + Jinja2 (autoescape, a Content-Security-Policy without any script);
``export.py`` writes the same pages as a self-contained folder. Model text is only ever
text: escaped in every page, never in an ``href``/``src``/``style``.
"""
