-- Version 9 to 10: the launch axis (how the GPU forward enqueues a unit's kernels: one launch
-- each, or one CUDA graph per unit). Every cell before it launched its kernels one by one.
ALTER TABLE cells ADD COLUMN launch TEXT NOT NULL DEFAULT 'kernels';
UPDATE schema_info SET version = 10;
PRAGMA user_version = 10;
