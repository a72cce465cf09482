-- Version 6 to 7: the prefetch_api axis is gone. uvm-prefetch's batched and chunked prefetches
-- lost to one cudaMemPrefetchAsync per layer on an H100, so every cell prefetches that way again;
-- the cell keys of cells that tried the others still name them. The reference logits GPU cells
-- are checked against are kept, so each workload's host forward runs once. And the noise
-- criterion: cells before it ran their fixed iterations, with no criterion (max_noise 0).
ALTER TABLE cells DROP COLUMN prefetch_api;
ALTER TABLE cells ADD COLUMN check_reference_key TEXT;
ALTER TABLE cells ADD COLUMN max_noise_pct REAL NOT NULL DEFAULT 0;
ALTER TABLE cells ADD COLUMN max_iterations INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cells ADD COLUMN max_time_s REAL NOT NULL DEFAULT 0;
ALTER TABLE cells ADD COLUMN noise_pct REAL;
ALTER TABLE cells ADD COLUMN noisy INTEGER NOT NULL DEFAULT 0;
-- The host forward's logits that GPU cells are checked against (only the prefix checks of the
-- large models, whose host forward costs seconds), computed by the first cell of a workload and
-- reused by every later one: reference_key hashes what they depend on (the model's shape, the
-- synthetic weights' seed, the tokens, the dropout). logits: float32 in the writer's byte order,
-- [batch, seq, vocab].
CREATE TABLE reference_logits (
    reference_key TEXT PRIMARY KEY,
    model         TEXT NOT NULL,
    batch         INTEGER NOT NULL,
    seq           INTEGER NOT NULL,
    vocab         INTEGER NOT NULL,
    logits        BLOB NOT NULL
);
UPDATE schema_info SET version = 7;
PRAGMA user_version = 7;
