"""Writing outputs without ever losing data: atomic files and folders (:mod:`.files`), the table formats poolkit
writes (:mod:`.tables`) and the one model of a run's output folder (:mod:`.runs`)."""

from .files import (OLD_SUFFIX, TMP_SUFFIX, atomic_write, atomic_write_content, atomic_write_json, build_dir,
                    existing_dir, file_digest, fsync_dir, fsync_tree, is_cache_name, made_by_poolkit, refuse_overwrite,
                    replace_dir, temp_dir)
from .runs import MANIFEST, RunFolder, fold_models, locked_dir, publish
from .tables import TABLE_SUFFIXES, table_format, write_table

__all__ = ["MANIFEST", "OLD_SUFFIX", "TABLE_SUFFIXES", "TMP_SUFFIX", "RunFolder", "atomic_write",
           "atomic_write_content", "atomic_write_json", "build_dir", "existing_dir", "file_digest", "fold_models",
           "fsync_dir", "fsync_tree", "is_cache_name", "locked_dir", "made_by_poolkit", "publish", "refuse_overwrite", "replace_dir", "table_format",
           "temp_dir",
           "write_table"]
