"""Recipes and NeMo-Run launch plugins.

Kept import-light on purpose: ``import megatron.bridge.recipes`` pulls in neither
NeMo-Run nor megatron-core. Import ``megatron.bridge.recipes.run_plugins`` for
``PerfEnvPlugin`` and ``NsysPlugin`` (needs the ``run`` extra).
"""
