"""Loading pipelines from every source: folders, single files, the hub cache, the demo; devices, dtypes, schedulers."""
