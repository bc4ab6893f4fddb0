"""Methods as plug-ins: see :mod:`edv_ray.plugins` (the table of methods and the
registry), :mod:`edv_ray.methods.registry` (the ``Method`` protocol) and
:mod:`edv_ray.methods.steps` (the reusable steps methods compose).

Nothing is imported here, so a method's config module loads without the others."""
