import { slowReceiversContract } from './slow-receivers-contract.js';

// Hanging receivers on RabbitMQ (prefetch of the delivery consumer's channel).
slowReceiversContract('amqp');
