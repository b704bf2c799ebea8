import { slowReceiversContract } from './slow-receivers-contract.js';

// Hanging receivers on the PostgreSQL queue (jobs a consumer claims at once).
slowReceiversContract('pg');
