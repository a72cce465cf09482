-- The tables of the results database, but for `cells`, whose columns the axis and measure
-- declarations make (harness/store/schema.cpp), and the columns of `runs` added after version 2,
-- declared there too. Run on every opening for writing, so a table added by a later version is
-- added to an older file: every statement says IF NOT EXISTS (OR IGNORE for rows). results/README.md
-- documents every column; tests check the two agree. Comments stay between statements: SQLite
-- keeps each CREATE statement's text, and a comment inside one would become part of every
-- database's schema.
CREATE TABLE IF NOT EXISTS schema_info (
    version     INTEGER NOT NULL,
    created_at  TEXT NOT NULL,
    created_by  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    run_id            INTEGER PRIMARY KEY,
    started_at        TEXT NOT NULL,
    finished_at       TEXT,
    status            TEXT NOT NULL CHECK (status IN ('running', 'finished', 'interrupted')),
    host              TEXT,
    os                TEXT,
    cpu_model         TEXT,
    cpu_count         INTEGER,
    gpu_name          TEXT,
    gpu_driver        TEXT,
    cuda_runtime      TEXT,
    sweetspot_version TEXT,
    git_revision      TEXT,
    command_line      TEXT,
    matrix_path       TEXT,
    matrix_name       TEXT,
    matrix_hash       TEXT,
    matrix_text       TEXT,
    cells_total       INTEGER,
    h2d_gbps          REAL,
    d2h_gbps          REAL,
    gpu_memory_bytes  INTEGER
);
CREATE TABLE IF NOT EXISTS managed_probe (
    run_id     INTEGER NOT NULL REFERENCES runs(run_id),
    operation  TEXT NOT NULL,
    bytes      INTEGER NOT NULL,
    calls      INTEGER NOT NULL,
    gbps       REAL NOT NULL,
    host_ms    REAL NOT NULL,
    PRIMARY KEY (run_id, operation)
);
-- bench_kernels --db: each GPU op's timed runs in one dtype and shape (tests/ops), so that
-- `sweetspot compare` judges a kernel change as it judges a cell's.
CREATE TABLE IF NOT EXISTS kernel_timings (
    run_id     INTEGER NOT NULL REFERENCES runs(run_id),
    op         TEXT NOT NULL,
    dtype      TEXT NOT NULL,
    shape      TEXT NOT NULL,
    flops      REAL NOT NULL,
    bytes      REAL NOT NULL,
    iteration  INTEGER NOT NULL,
    ms         REAL NOT NULL,
    PRIMARY KEY (run_id, op, dtype, shape, iteration)
);
CREATE TABLE IF NOT EXISTS iterations (
    cell_id     INTEGER NOT NULL REFERENCES cells(cell_id) ON DELETE CASCADE,
    phase       TEXT NOT NULL CHECK (phase IN ('warmup', 'timed', 'traced')),
    iteration   INTEGER NOT NULL,
    latency_ms  REAL NOT NULL,
    PRIMARY KEY (cell_id, phase, iteration)
);

-- Earlier measurements of a cell that a newer one replaced in `cells` (--rerun, a cell that was
-- not ok measured again): its row and its iterations, as JSON.
CREATE TABLE IF NOT EXISTS cell_history (
    history_id    INTEGER PRIMARY KEY,
    cell_key      TEXT NOT NULL,
    superseded_at TEXT NOT NULL,
    cell          TEXT NOT NULL,
    iterations    TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS cell_history_key ON cell_history (cell_key);

-- The host forward's logits that GPU cells are checked against (only the prefix checks of the
-- large models, whose host forward costs seconds), computed by the first cell of a workload and
-- reused by every later one: reference_key hashes what they depend on (the model's shape, the
-- synthetic weights' seed, the tokens, the dropout). logits: float32 in the writer's byte order,
-- [batch, seq, vocab].
CREATE TABLE IF NOT EXISTS reference_logits (
    reference_key TEXT PRIMARY KEY,
    model         TEXT NOT NULL,
    batch         INTEGER NOT NULL,
    seq           INTEGER NOT NULL,
    vocab         INTEGER NOT NULL,
    logits        BLOB NOT NULL
);

-- Where each cell's wall time went (results/README.md names the phases).
CREATE TABLE IF NOT EXISTS cell_phases (
    cell_id  INTEGER NOT NULL REFERENCES cells(cell_id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    phase    TEXT NOT NULL,
    seconds  REAL NOT NULL,
    PRIMARY KEY (cell_id, position)
);

-- Event tables: the names and columns of Nsight Systems' SQLite export, plus cell_id (run_id for
-- TARGET_INFO_GPU), so queries written for nsys exports carry over. "end" is an SQL keyword, hence
-- quoted.
CREATE TABLE IF NOT EXISTS TARGET_INFO_GPU (
    run_id      INTEGER NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    id          INTEGER NOT NULL,
    name        TEXT,
    totalMemory INTEGER,
    PRIMARY KEY (run_id, id)
);
CREATE TABLE IF NOT EXISTS StringIds (
    id    INTEGER PRIMARY KEY,
    value TEXT NOT NULL UNIQUE
);
CREATE TABLE IF NOT EXISTS CUPTI_ACTIVITY_KIND_KERNEL (
    cell_id             INTEGER NOT NULL REFERENCES cells(cell_id) ON DELETE CASCADE,
    start               INTEGER NOT NULL,
    "end"               INTEGER NOT NULL,
    deviceId            INTEGER NOT NULL,
    contextId           INTEGER NOT NULL,
    streamId            INTEGER NOT NULL,
    correlationId       INTEGER NOT NULL,
    gridX               INTEGER NOT NULL,
    gridY               INTEGER NOT NULL,
    gridZ               INTEGER NOT NULL,
    blockX              INTEGER NOT NULL,
    blockY              INTEGER NOT NULL,
    blockZ              INTEGER NOT NULL,
    registersPerThread  INTEGER NOT NULL,
    staticSharedMemory  INTEGER NOT NULL,
    dynamicSharedMemory INTEGER NOT NULL,
    shortName           INTEGER NOT NULL REFERENCES StringIds(id),
    demangledName       INTEGER NOT NULL REFERENCES StringIds(id)
);
CREATE INDEX IF NOT EXISTS CUPTI_ACTIVITY_KIND_KERNEL_cell ON CUPTI_ACTIVITY_KIND_KERNEL(cell_id);
CREATE TABLE IF NOT EXISTS CUPTI_ACTIVITY_KIND_MEMCPY (
    cell_id        INTEGER NOT NULL REFERENCES cells(cell_id) ON DELETE CASCADE,
    start          INTEGER NOT NULL,
    "end"          INTEGER NOT NULL,
    deviceId       INTEGER NOT NULL,
    contextId      INTEGER NOT NULL,
    streamId       INTEGER NOT NULL,
    correlationId  INTEGER NOT NULL,
    copyKind       INTEGER NOT NULL REFERENCES ENUM_CUDA_MEMCPY_OPER(id),
    srcKind        INTEGER NOT NULL,
    dstKind        INTEGER NOT NULL,
    bytes          INTEGER NOT NULL,
    migrationCause INTEGER REFERENCES ENUM_CUDA_UNIF_MEM_MIGRATION(id),
    virtualAddress INTEGER
);
CREATE INDEX IF NOT EXISTS CUPTI_ACTIVITY_KIND_MEMCPY_cell ON CUPTI_ACTIVITY_KIND_MEMCPY(cell_id);
CREATE TABLE IF NOT EXISTS CUDA_UM_GPU_PAGE_FAULT_EVENTS (
    cell_id            INTEGER NOT NULL REFERENCES cells(cell_id) ON DELETE CASCADE,
    start              INTEGER NOT NULL,
    "end"              INTEGER NOT NULL,
    deviceId           INTEGER NOT NULL,
    address            INTEGER NOT NULL,
    numberOfPageFaults INTEGER NOT NULL,
    faultAccessType    INTEGER NOT NULL REFERENCES ENUM_CUDA_UNIF_MEM_ACCESS_TYPE(id)
);
CREATE INDEX IF NOT EXISTS CUDA_UM_GPU_PAGE_FAULT_EVENTS_cell ON CUDA_UM_GPU_PAGE_FAULT_EVENTS(cell_id);
CREATE TABLE IF NOT EXISTS CUDA_UM_CPU_PAGE_FAULT_EVENTS (
    cell_id         INTEGER NOT NULL REFERENCES cells(cell_id) ON DELETE CASCADE,
    start           INTEGER NOT NULL,
    address         INTEGER NOT NULL,
    originalFaultPc INTEGER
);
CREATE INDEX IF NOT EXISTS CUDA_UM_CPU_PAGE_FAULT_EVENTS_cell ON CUDA_UM_CPU_PAGE_FAULT_EVENTS(cell_id);
CREATE TABLE IF NOT EXISTS UM_COUNTER_EVENTS (
    cell_id INTEGER NOT NULL REFERENCES cells(cell_id) ON DELETE CASCADE,
    kind    TEXT NOT NULL CHECK (kind IN ('thrashing', 'throttling', 'remote_map')),
    start   INTEGER NOT NULL,
    "end"   INTEGER NOT NULL,
    address INTEGER NOT NULL,
    value   INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS UM_COUNTER_EVENTS_cell ON UM_COUNTER_EVENTS(cell_id);
CREATE TABLE IF NOT EXISTS NVTX_EVENTS (
    cell_id   INTEGER NOT NULL REFERENCES cells(cell_id) ON DELETE CASCADE,
    start     INTEGER NOT NULL,
    "end"     INTEGER NOT NULL,
    text      TEXT,
    textId    INTEGER REFERENCES StringIds(id),
    globalTid INTEGER NOT NULL,
    eventType INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS NVTX_EVENTS_cell ON NVTX_EVENTS(cell_id);
-- CUDA runtime and driver API calls, in one table as nsys keeps them: what correlates a kernel or
-- copy with the host thread and time that launched it.
CREATE TABLE IF NOT EXISTS CUPTI_ACTIVITY_KIND_RUNTIME (
    cell_id       INTEGER NOT NULL REFERENCES cells(cell_id) ON DELETE CASCADE,
    start         INTEGER NOT NULL,
    "end"         INTEGER NOT NULL,
    globalTid     INTEGER NOT NULL,
    correlationId INTEGER NOT NULL,
    nameId        INTEGER NOT NULL REFERENCES StringIds(id),
    returnValue   INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS CUPTI_ACTIVITY_KIND_RUNTIME_cell ON CUPTI_ACTIVITY_KIND_RUNTIME(cell_id, correlationId);
CREATE TABLE IF NOT EXISTS CUPTI_ACTIVITY_KIND_OVERHEAD (
    cell_id      INTEGER NOT NULL REFERENCES cells(cell_id) ON DELETE CASCADE,
    start        INTEGER NOT NULL,
    "end"        INTEGER NOT NULL,
    overheadKind INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS CUPTI_ACTIVITY_KIND_OVERHEAD_cell ON CUPTI_ACTIVITY_KIND_OVERHEAD(cell_id);
CREATE TABLE IF NOT EXISTS ENUM_CUDA_MEMCPY_OPER (
    id    INTEGER PRIMARY KEY,
    name  TEXT NOT NULL,
    label TEXT NOT NULL
);
INSERT OR IGNORE INTO ENUM_CUDA_MEMCPY_OPER VALUES
    (0, 'CUDA_MEMCPY_KIND_UNKNOWN', 'Unknown'),
    (1, 'CUDA_MEMCPY_KIND_HTOD', 'Host-to-Device'),
    (2, 'CUDA_MEMCPY_KIND_DTOH', 'Device-to-Host'),
    (3, 'CUDA_MEMCPY_KIND_HTOA', 'Host-to-Array'),
    (4, 'CUDA_MEMCPY_KIND_ATOH', 'Array-to-Host'),
    (5, 'CUDA_MEMCPY_KIND_ATOA', 'Array-to-Array'),
    (6, 'CUDA_MEMCPY_KIND_ATOD', 'Array-to-Device'),
    (7, 'CUDA_MEMCPY_KIND_DTOA', 'Device-to-Array'),
    (8, 'CUDA_MEMCPY_KIND_DTOD', 'Device-to-Device'),
    (9, 'CUDA_MEMCPY_KIND_HTOH', 'Host-to-Host'),
    (10, 'CUDA_MEMCPY_KIND_PTOP', 'Peer-to-Peer'),
    (11, 'CUDA_MEMCPY_KIND_UVM_HTOD', 'Unified Host-to-Device'),
    (12, 'CUDA_MEMCPY_KIND_UVM_DTOH', 'Unified Device-to-Host'),
    (13, 'CUDA_MEMCPY_KIND_UVM_DTOD', 'Unified Device-to-Device');
CREATE TABLE IF NOT EXISTS ENUM_CUDA_UNIF_MEM_MIGRATION (
    id    INTEGER PRIMARY KEY,
    name  TEXT NOT NULL,
    label TEXT NOT NULL
);
INSERT OR IGNORE INTO ENUM_CUDA_UNIF_MEM_MIGRATION VALUES
    (0, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_UNKNOWN', 'Unknown'),
    (1, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_USER', 'User prefetch'),
    (2, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_COHERENCE', 'Page fault'),
    (3, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_PREFETCH', 'Speculative prefetch'),
    (4, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_EVICTION', 'Eviction'),
    (5, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_ACCESS_COUNTERS', 'Access counters');
CREATE TABLE IF NOT EXISTS ENUM_CUDA_UNIF_MEM_ACCESS_TYPE (
    id    INTEGER PRIMARY KEY,
    name  TEXT NOT NULL,
    label TEXT NOT NULL
);
INSERT OR IGNORE INTO ENUM_CUDA_UNIF_MEM_ACCESS_TYPE VALUES
    (0, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_ACCESS_TYPE_UNKNOWN', 'Unknown'),
    (1, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_ACCESS_TYPE_READ', 'Read'),
    (2, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_ACCESS_TYPE_WRITE', 'Write'),
    (3, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_ACCESS_TYPE_ATOMIC', 'Atomic'),
    (4, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_ACCESS_TYPE_PREFETCH', 'Prefetch');

-- Per-cell views named after the `nsys stats` reports they imitate; `sweetspot summary --cell`
-- prints them, and results/README.md documents them.

-- What this file's `cells` columns are: its axes (the cell's parameters) and its measures (what
-- was measured, derived or predicted), as the sweetspot that last wrote to it declares them
-- (harness/matrix/axes.cpp, harness/matrix/measures.hpp); rewritten on every opening for writing.
CREATE TABLE IF NOT EXISTS axes (
    name          TEXT PRIMARY KEY,
    column_name   TEXT NOT NULL,
    type          TEXT NOT NULL,
    role          TEXT NOT NULL CHECK (role IN ('workload', 'placement', 'protocol', 'limit')),
    in_matrix     INTEGER NOT NULL,
    keyed         TEXT NOT NULL CHECK (keyed IN ('always', 'unless_default', 'no')),
    default_value TEXT NOT NULL,
    unit          TEXT NOT NULL,
    since         INTEGER NOT NULL,
    meaning       TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS measures (
    name       TEXT PRIMARY KEY,
    type       TEXT NOT NULL,
    unit       TEXT NOT NULL,
    filled_by  TEXT NOT NULL CHECK (filled_by IN ('cell', 'parent', 'estimator', 'derived')),
    in_summary INTEGER NOT NULL,
    in_compare INTEGER NOT NULL,
    since      INTEGER NOT NULL,
    meaning    TEXT NOT NULL
);
