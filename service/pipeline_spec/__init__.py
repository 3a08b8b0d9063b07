"""The pipeline spec (contract.md, "Pipeline spec"): what a user writes, checked, and
turned into what the runtime runs.

- :mod:`.models`: the pydantic models, each field checked on its own;
- :mod:`.rules`: how fields fit together, each rule one declaration carrying its check
  and, where JSON Schema can state it, its schema fragment;
- :mod:`.schema`: the JSON Schema (``/schema/pipeline``, the OpenAPI document, the
  console's validator), assembled from the models and the rules' fragments;
- :mod:`.build`: a validated spec -> the runtime's pydantic-free
  :class:`~service.runtime.definition.PipelineDefinition`, in one place.

A layer of its own between the runtime and the API: it imports ``core``, ``operators``
and the runtime's definition and operator factories, never ``api``; the API, the
benchmarks and anything else that reads a spec import it without the web application.
Not named ``spec``: a ``spec/`` folder is where RSpec and Jasmine keep their tests, and
tools that follow that convention would leave this package out.
"""
