-- Version 6 to 7: the prefetch_api axis is gone. uvm-prefetch's batched and chunked prefetches
-- lost to one cudaMemPrefetchAsync per layer on an H100, so every cell prefetches that way again;
-- the cell keys of cells that tried the others still name them.
ALTER TABLE cells DROP COLUMN prefetch_api;
UPDATE schema_info SET version = 7;
PRAGMA user_version = 7;
