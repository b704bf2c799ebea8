import { retryContract } from './retries-contract.js';

// Retries on the embedded PostgreSQL queue: run_at carries the delay.
retryContract('pg');
