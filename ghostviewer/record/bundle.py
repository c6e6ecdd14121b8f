"""Bug-report bundles: export runs to one zip, inspect it, open it safely (torch-free, Qt-free).

    export_bundle(run_dirs, out_zip, include_tensors=True, include_feature_maps=True,
                  isolated={run_id: folder}, not_isolated={run_id: why}) -> dict   # folders the engine isolated
    estimate_bundle_size(run_dirs, ...) -> int
    inspect_bundle(zip_path) -> {"manifest", "runs", "files"}     # reads, checks, writes nothing
    open_bundle(zip_path, dest_dir) -> [run folders]               # extracts into a new folder
"""

from .bundle_export import estimate_bundle_size, export_bundle
from .bundle_format import BUNDLE_VERSION, DEFAULT_MAX_SIZE, MAX_RATIO, BundleError
from .bundle_read import inspect_bundle, open_bundle

__all__ = [
    "BUNDLE_VERSION",
    "DEFAULT_MAX_SIZE",
    "MAX_RATIO",
    "BundleError",
    "estimate_bundle_size",
    "export_bundle",
    "inspect_bundle",
    "open_bundle",
]
