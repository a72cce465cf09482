-- The current schema (kSchemaVersion). results/README.md documents every column; tests check the
-- two agree. Comments stay between statements: SQLite keeps each CREATE statement's text, and a
-- comment inside one would become part of every database's schema.
CREATE TABLE schema_info (
    version     INTEGER NOT NULL,
    created_at  TEXT NOT NULL,
    created_by  TEXT NOT NULL
);
CREATE TABLE runs (
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
    gpu_memory_bytes  INTEGER,
    concurrent_managed_access                    INTEGER,
    pageable_memory_access                       INTEGER,
    pageable_memory_access_uses_host_page_tables INTEGER,
    direct_managed_mem_access_from_host          INTEGER
);
CREATE TABLE managed_probe (
    run_id     INTEGER NOT NULL REFERENCES runs(run_id),
    operation  TEXT NOT NULL,
    bytes      INTEGER NOT NULL,
    calls      INTEGER NOT NULL,
    gbps       REAL NOT NULL,
    host_ms    REAL NOT NULL,
    PRIMARY KEY (run_id, operation)
);
CREATE TABLE cells (
    cell_id             INTEGER PRIMARY KEY,
    run_id              INTEGER NOT NULL REFERENCES runs(run_id),
    cell_key            TEXT NOT NULL UNIQUE,
    cell_index          INTEGER NOT NULL,
    sweep               TEXT,
    status              TEXT NOT NULL CHECK (status IN ('ok', 'failed', 'timeout', 'skipped', 'invalid')),
    reason              TEXT,
    model               TEXT NOT NULL,
    n_layer             INTEGER NOT NULL,
    n_embd              INTEGER NOT NULL,
    n_head              INTEGER NOT NULL,
    vocab_size          INTEGER NOT NULL,
    max_positions       INTEGER NOT NULL,
    n_params            INTEGER NOT NULL,
    variant             TEXT NOT NULL,
    backend             TEXT NOT NULL,
    dtype               TEXT NOT NULL,
    batch               INTEGER NOT NULL,
    seq                 INTEGER NOT NULL,
    streams             INTEGER NOT NULL,
    prefetch            TEXT NOT NULL,
    budget              TEXT NOT NULL,
    budget_bytes        INTEGER NOT NULL,
    weight_bytes        INTEGER NOT NULL,
    oversubscription    REAL NOT NULL,
    resident            TEXT NOT NULL,
    evict               TEXT NOT NULL,
    tf32                INTEGER NOT NULL,
    launch              TEXT NOT NULL,
    dropout             REAL NOT NULL,
    activations         TEXT NOT NULL,
    mode                TEXT NOT NULL,
    weights             TEXT NOT NULL,
    warmups             INTEGER NOT NULL,
    iterations          INTEGER NOT NULL,
    trace_iterations    INTEGER NOT NULL,
    max_noise_pct       REAL NOT NULL,
    max_iterations      INTEGER NOT NULL,
    max_time_s          REAL NOT NULL,
    seed                INTEGER NOT NULL,
    repeat              INTEGER NOT NULL,
    timeout_s           REAL NOT NULL,
    debug_fault         TEXT NOT NULL,
    canonical           TEXT NOT NULL,
    started_at          TEXT,
    finished_at         TEXT,
    wall_s              REAL,
    init_s              REAL,
    exit_code           INTEGER,
    signal              INTEGER,
    stderr_tail         TEXT,
    latency_median_ms   REAL,
    latency_p10_ms      REAL,
    latency_p90_ms      REAL,
    latency_min_ms      REAL,
    latency_max_ms      REAL,
    latency_mean_ms     REAL,
    tokens_per_s        REAL,
    resident_bytes      INTEGER,
    streamed_bytes      INTEGER,
    streamed_gbps       REAL,
    device_weight_bytes INTEGER,
    pinned_host_bytes   INTEGER,
    device_used_bytes   INTEGER,
    predicted_alloc_bytes INTEGER,
    predicted_peak_bytes INTEGER,
    predicted_host_peak_bytes INTEGER,
    predicted_host_alloc_bytes INTEGER,
    gpu_used_before_bytes INTEGER,
    gpu_context_bytes   INTEGER,
    gpu_peak_bytes      INTEGER,
    gpu_own_peak_bytes  INTEGER,
    gpu_other_processes INTEGER,
    gpu_other_bytes     INTEGER,
    gpu_memory_readings INTEGER,
    gpu_memory_note     TEXT,
    gpu                 TEXT,
    check_reference     TEXT,
    check_max_abs_err   REAL,
    check_rel_err       REAL,
    check_tolerance     REAL,
    check_reference_key TEXT,
    check_reference_computed INTEGER,
    noise_pct           REAL,
    noisy               INTEGER NOT NULL DEFAULT 0,
    peak_host_rss_bytes INTEGER,
    activation_bytes    INTEGER,
    launches_per_forward INTEGER,
    um_profiling        TEXT,
    um_htod_bytes       INTEGER,
    um_dtoh_bytes       INTEGER,
    gpu_page_faults     INTEGER,
    cpu_page_faults     INTEGER,
    thrashing           INTEGER,
    throttling          INTEGER,
    remote_maps         INTEGER,
    kernel_busy_ms      REAL,
    copy_ms             REAL,
    copy_compute_overlap_ms REAL,
    dropped_records     INTEGER,
    collector_overhead_ms REAL
);
CREATE INDEX cells_run ON cells(run_id);
CREATE TABLE iterations (
    cell_id     INTEGER NOT NULL REFERENCES cells(cell_id) ON DELETE CASCADE,
    phase       TEXT NOT NULL CHECK (phase IN ('warmup', 'timed', 'traced')),
    iteration   INTEGER NOT NULL,
    latency_ms  REAL NOT NULL,
    PRIMARY KEY (cell_id, phase, iteration)
);

-- Earlier measurements of a cell that a newer one replaced in `cells` (--rerun, a cell that was
-- not ok measured again): its row and its iterations, as JSON.
CREATE TABLE cell_history (
    history_id    INTEGER PRIMARY KEY,
    cell_key      TEXT NOT NULL,
    superseded_at TEXT NOT NULL,
    cell          TEXT NOT NULL,
    iterations    TEXT NOT NULL
);
CREATE INDEX cell_history_key ON cell_history (cell_key);

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

-- Where each cell's wall time went (results/README.md names the phases).
CREATE TABLE cell_phases (
    cell_id  INTEGER NOT NULL REFERENCES cells(cell_id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    phase    TEXT NOT NULL,
    seconds  REAL NOT NULL,
    PRIMARY KEY (cell_id, position)
);
CREATE VIEW cell_summary AS
SELECT cell_id, model, backend, variant, dtype, batch, seq, streams, prefetch, budget,
       status, latency_median_ms, latency_p10_ms, latency_p90_ms, tokens_per_s,
       check_rel_err, reason
FROM cells;

-- Event tables: the names and columns of Nsight Systems' SQLite export, plus cell_id (run_id for
-- TARGET_INFO_GPU), so queries written for nsys exports carry over. "end" is an SQL keyword, hence
-- quoted.
CREATE TABLE TARGET_INFO_GPU (
    run_id      INTEGER NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    id          INTEGER NOT NULL,
    name        TEXT,
    totalMemory INTEGER,
    PRIMARY KEY (run_id, id)
);
CREATE TABLE StringIds (
    id    INTEGER PRIMARY KEY,
    value TEXT NOT NULL UNIQUE
);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (
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
CREATE INDEX CUPTI_ACTIVITY_KIND_KERNEL_cell ON CUPTI_ACTIVITY_KIND_KERNEL(cell_id);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (
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
CREATE INDEX CUPTI_ACTIVITY_KIND_MEMCPY_cell ON CUPTI_ACTIVITY_KIND_MEMCPY(cell_id);
CREATE TABLE CUDA_UM_GPU_PAGE_FAULT_EVENTS (
    cell_id            INTEGER NOT NULL REFERENCES cells(cell_id) ON DELETE CASCADE,
    start              INTEGER NOT NULL,
    "end"              INTEGER NOT NULL,
    deviceId           INTEGER NOT NULL,
    address            INTEGER NOT NULL,
    numberOfPageFaults INTEGER NOT NULL,
    faultAccessType    INTEGER NOT NULL REFERENCES ENUM_CUDA_UNIF_MEM_ACCESS_TYPE(id)
);
CREATE INDEX CUDA_UM_GPU_PAGE_FAULT_EVENTS_cell ON CUDA_UM_GPU_PAGE_FAULT_EVENTS(cell_id);
CREATE TABLE CUDA_UM_CPU_PAGE_FAULT_EVENTS (
    cell_id         INTEGER NOT NULL REFERENCES cells(cell_id) ON DELETE CASCADE,
    start           INTEGER NOT NULL,
    address         INTEGER NOT NULL,
    originalFaultPc INTEGER
);
CREATE INDEX CUDA_UM_CPU_PAGE_FAULT_EVENTS_cell ON CUDA_UM_CPU_PAGE_FAULT_EVENTS(cell_id);
CREATE TABLE UM_COUNTER_EVENTS (
    cell_id INTEGER NOT NULL REFERENCES cells(cell_id) ON DELETE CASCADE,
    kind    TEXT NOT NULL CHECK (kind IN ('thrashing', 'throttling', 'remote_map')),
    start   INTEGER NOT NULL,
    "end"   INTEGER NOT NULL,
    address INTEGER NOT NULL,
    value   INTEGER NOT NULL
);
CREATE INDEX UM_COUNTER_EVENTS_cell ON UM_COUNTER_EVENTS(cell_id);
CREATE TABLE NVTX_EVENTS (
    cell_id   INTEGER NOT NULL REFERENCES cells(cell_id) ON DELETE CASCADE,
    start     INTEGER NOT NULL,
    "end"     INTEGER NOT NULL,
    text      TEXT,
    textId    INTEGER REFERENCES StringIds(id),
    globalTid INTEGER NOT NULL,
    eventType INTEGER NOT NULL
);
CREATE INDEX NVTX_EVENTS_cell ON NVTX_EVENTS(cell_id);
CREATE TABLE CUPTI_ACTIVITY_KIND_OVERHEAD (
    cell_id      INTEGER NOT NULL REFERENCES cells(cell_id) ON DELETE CASCADE,
    start        INTEGER NOT NULL,
    "end"        INTEGER NOT NULL,
    overheadKind INTEGER NOT NULL
);
CREATE INDEX CUPTI_ACTIVITY_KIND_OVERHEAD_cell ON CUPTI_ACTIVITY_KIND_OVERHEAD(cell_id);
CREATE TABLE ENUM_CUDA_MEMCPY_OPER (
    id    INTEGER PRIMARY KEY,
    name  TEXT NOT NULL,
    label TEXT NOT NULL
);
INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES
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
CREATE TABLE ENUM_CUDA_UNIF_MEM_MIGRATION (
    id    INTEGER PRIMARY KEY,
    name  TEXT NOT NULL,
    label TEXT NOT NULL
);
INSERT INTO ENUM_CUDA_UNIF_MEM_MIGRATION VALUES
    (0, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_UNKNOWN', 'Unknown'),
    (1, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_USER', 'User prefetch'),
    (2, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_COHERENCE', 'Page fault'),
    (3, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_PREFETCH', 'Speculative prefetch'),
    (4, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_EVICTION', 'Eviction'),
    (5, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_ACCESS_COUNTERS', 'Access counters');
CREATE TABLE ENUM_CUDA_UNIF_MEM_ACCESS_TYPE (
    id    INTEGER PRIMARY KEY,
    name  TEXT NOT NULL,
    label TEXT NOT NULL
);
INSERT INTO ENUM_CUDA_UNIF_MEM_ACCESS_TYPE VALUES
    (0, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_ACCESS_TYPE_UNKNOWN', 'Unknown'),
    (1, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_ACCESS_TYPE_READ', 'Read'),
    (2, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_ACCESS_TYPE_WRITE', 'Write'),
    (3, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_ACCESS_TYPE_ATOMIC', 'Atomic'),
    (4, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_ACCESS_TYPE_PREFETCH', 'Prefetch');

-- Per-cell views named after the `nsys stats` reports they imitate; `sweetspot summary --cell`
-- prints them, and results/README.md documents them.
CREATE VIEW cuda_gpu_kern_sum AS
SELECT k.cell_id,
       100.0 * sum(k."end" - k.start) / sum(sum(k."end" - k.start)) OVER (PARTITION BY k.cell_id) AS time_percent,
       sum(k."end" - k.start) AS total_ns,
       count(*) AS instances,
       avg(k."end" - k.start) AS avg_ns,
       min(k."end" - k.start) AS min_ns,
       max(k."end" - k.start) AS max_ns,
       s.value AS name
FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
GROUP BY k.cell_id, k.shortName;
CREATE VIEW nvtx_sum AS
SELECT n.cell_id,
       100.0 * sum(n."end" - n.start) / sum(sum(n."end" - n.start)) OVER (PARTITION BY n.cell_id) AS time_percent,
       sum(n."end" - n.start) AS total_ns,
       count(*) AS instances,
       avg(n."end" - n.start) AS avg_ns,
       min(n."end" - n.start) AS min_ns,
       max(n."end" - n.start) AS max_ns,
       coalesce(n.text, s.value) AS range
FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
GROUP BY n.cell_id, coalesce(n.text, s.value);
CREATE VIEW um_total_sum AS
SELECT c.cell_id,
       (SELECT coalesce(sum(bytes), 0) FROM CUPTI_ACTIVITY_KIND_MEMCPY m
         WHERE m.cell_id = c.cell_id AND m.copyKind = 11) AS htod_bytes,
       (SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY m
         WHERE m.cell_id = c.cell_id AND m.copyKind = 11) AS htod_migrations,
       (SELECT coalesce(sum(bytes), 0) FROM CUPTI_ACTIVITY_KIND_MEMCPY m
         WHERE m.cell_id = c.cell_id AND m.copyKind = 12) AS dtoh_bytes,
       (SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY m
         WHERE m.cell_id = c.cell_id AND m.copyKind = 12) AS dtoh_migrations,
       (SELECT count(*) FROM CUDA_UM_CPU_PAGE_FAULT_EVENTS f WHERE f.cell_id = c.cell_id) AS cpu_page_faults,
       (SELECT coalesce(sum(numberOfPageFaults), 0) FROM CUDA_UM_GPU_PAGE_FAULT_EVENTS f
         WHERE f.cell_id = c.cell_id) AS gpu_page_faults
FROM cells c WHERE c.um_profiling IS NOT NULL;
