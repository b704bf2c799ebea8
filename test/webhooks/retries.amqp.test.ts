import { retryContract } from './retries-contract.js';

// Retries on RabbitMQ: one TTL queue per delay step, dead-lettering back to the work queue.
retryContract('amqp');
