import type { RequestHandler } from 'express';
import { ApiError } from '../errors.js';

/**
 * Reads JSON bodies with a per-route size limit. Each failure has its own answer in shape A:
 * 413 over the limit (checked against Content-Length before reading, and while reading),
 * 415 for a non-JSON content type, 400 for malformed JSON. Routes listed with `passThrough`
 * (multipart uploads, proxies) are left unread.
 */

export interface BodyRule {
  /** Matched against the path without query, e.g. /^\/v1\/media\/upload$/. */
  path: RegExp;
  /** Max bytes for this route. */
  limit?: number;
  /** Leave the stream unread for the handler (multipart, streaming proxies). */
  passThrough?: boolean;
}

const UNITS: Record<string, number> = { b: 1, kb: 1024, mb: 1024 * 1024 };

export function parseSize(size: string): number {
  const match = /^(\d+)(b|kb|mb)$/i.exec(size);
  if (!match) throw new Error(`bad size ${size}`);
  return Number(match[1]) * UNITS[match[2]!.toLowerCase()]!;
}

const isJsonType = (contentType: string) => /^application\/([\w.+-]*\+)?json\s*(;|$)/i.test(contentType);

export function bodyReader(options: { defaultLimit: number; rules?: BodyRule[]; keepRaw?: boolean }): RequestHandler {
  const rules = options.rules ?? [];
  return (req, _res, next) => {
    const method = req.method;
    if (method === 'GET' || method === 'HEAD' || method === 'OPTIONS' || method === 'DELETE' && !hasBody(req)) {
      req.body = undefined;
      return next();
    }
    const path = req.path;
    const rule = rules.find((r) => r.path.test(path));
    if (rule?.passThrough) return next();
    if (!hasBody(req)) {
      req.body = undefined;
      return next();
    }
    const contentType = req.headers['content-type'] ?? '';
    if (!isJsonType(contentType)) {
      req.resume();
      return next(new ApiError(415, `Content-Type must be application/json (got "${contentType.slice(0, 60) || 'none'}")`, { param: 'Content-Type' }));
    }
    const limit = rule?.limit ?? options.defaultLimit;
    const declared = Number(req.headers['content-length'] ?? NaN);
    if (Number.isFinite(declared) && declared > limit) {
      req.resume();
      return next(tooLarge(limit));
    }
    const chunks: Buffer[] = [];
    let received = 0;
    let failed = false;
    req.on('data', (chunk: Buffer) => {
      if (failed) return;
      received += chunk.length;
      if (received > limit) {
        failed = true;
        chunks.length = 0;
        next(tooLarge(limit));
        return;
      }
      chunks.push(chunk);
    });
    req.on('error', (error) => {
      if (failed) return;
      failed = true;
      next(new ApiError(400, 'The request body could not be read', { param: 'body', cause: error }));
    });
    req.on('end', () => {
      if (failed) return;
      const raw = Buffer.concat(chunks, received);
      if (options.keepRaw) req.rawBody = raw;
      const text = raw.toString('utf8');
      if (text.trim() === '') {
        req.body = undefined;
        return next();
      }
      try {
        req.body = JSON.parse(text);
      } catch (error) {
        return next(new ApiError(400, `Malformed JSON in request body: ${(error as Error).message}`, { param: 'body' }));
      }
      next();
    });
  };
}

function hasBody(req: { headers: Record<string, string | string[] | undefined> }): boolean {
  const length = req.headers['content-length'];
  if (length !== undefined) return Number(length) > 0;
  return req.headers['transfer-encoding'] !== undefined;
}

const tooLarge = (limit: number) =>
  new ApiError(413, `Request body exceeds the limit of ${limit} bytes for this route`, { param: 'body' });
