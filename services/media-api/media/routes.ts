import { pipeline } from 'node:stream';
import { ApiError, parseBody, parsePage } from '../../kit/index.js';
import { readJsonBody } from '../../kit/http/index.js';
import { route, type Route } from '../../kit/http/index.js';
import type { MediaApiDeps } from '../deps.js';
import { acceptSignedUpload, serveSigned } from '../files/signed.js';
import { completeUpload, deleteMedia, getMedia, listMedia, openContent, presignDownload, reserveUpload, statContent, uploadMedia } from './media.js';
import { resolveReferences } from './resolve.js';
import {
  downloadUrl,
  mediaDeleted,
  mediaList,
  mediaObject,
  presignDownloadBody,
  presignUploadBody,
  resolveBody,
  resolved,
  uploadBody,
  uploadReservation,
} from './schemas.js';
import { readMultipart } from './sources.js';

const MiB = 1024 * 1024;

/** The Media API as data (services/kit/http/route-table.ts). `deps` is touched only inside handlers. */
export function mediaRoutes(deps: () => MediaApiDeps, limits: { maxBytes: number; jsonMaxDepth?: number }): Route[] {
  // base64 grows bytes by 4/3, and MIME-style line breaks (CRLF after every 76 characters, four
  // bytes once escaped in JSON: what PHP's chunk_split, Java's MIME encoder and .NET's
  // InsertLineBreaks write) by another 80/76: an image within the size limit sent that way must
  // not be refused as a body too large. The JSON around it is small.
  const jsonUploadLimit = Math.ceil((Math.ceil(limits.maxBytes / 3) * 4 * 80) / 76) + MiB;
  return [
    route({
      method: 'post',
      path: '/v1/media/upload',
      summary: 'Upload an image from a URL, base64, a data URL (JSON) or a multipart `file` part',
      access: 'user',
      body: 'stream',
      // The body is read by the handler: JSON (`uploadBody`) or multipart/form-data.
      bodyLimit: jsonUploadLimit,
      response: { status: 201, schema: mediaObject, description: '201 when stored, 200 when the caller already had these bytes' },
      async handler({ req, res, principal, signal }) {
        const type = String(req.headers['content-type'] ?? '');
        let result;
        if (/^multipart\/form-data/i.test(type)) {
          const declared = Number(req.headers['content-length'] ?? NaN);
          if (Number.isFinite(declared) && declared > limits.maxBytes + MiB) {
            req.resume();
            throw new ApiError(413, `Request body exceeds the limit of ${limits.maxBytes + MiB} bytes for this route`, { param: 'body' });
          }
          const part = await readMultipart(req, limits.maxBytes);
          result = await uploadMedia(deps().media, principal.userId, { source: { type: 'bytes', bytes: part.bytes }, filename: part.filename }, signal);
        } else {
          const body = parseBody(uploadBody, await readJsonBody(req, { limit: jsonUploadLimit, maxDepth: limits.jsonMaxDepth }));
          result = await uploadMedia(deps().media, principal.userId, body, signal);
        }
        res.status(result.deduped ? 200 : 201).json(result.media);
        return undefined;
      },
    }),
    route({
      method: 'post',
      path: '/v1/media/presigned-url',
      summary: 'A time-limited download URL ({media_id}) or a reserved id with a direct-upload URL ({mime_type, bytes})',
      access: 'user',
      response: { status: 200, schema: downloadUrl.or(uploadReservation) },
      async handler({ req, res, principal }) {
        // Two bodies on one route (told apart by `media_id`), so no `request.body` for the mount to
        // check: each is parsed here, with the kit's body rule (a body that is not an object names `body`).
        const body: unknown = req.body;
        if (body && typeof body === 'object' && 'media_id' in body) {
          return presignDownload(deps().media, principal.userId, parseBody(presignDownloadBody, body));
        }
        const reservation = await reserveUpload(deps().media, principal.userId, parseBody(presignUploadBody, body));
        res.status(201).json(reservation);
        return undefined;
      },
    }),
    route({
      method: 'post',
      path: '/v1/media/resolve',
      summary: 'Replace every media reference in a JSON payload with a fresh download URL',
      access: 'user',
      bodyLimit: 16 * MiB,
      request: { body: resolveBody },
      response: { schema: resolved },
      handler: ({ principal, body }) => {
        if (!('payload' in (body as object))) throw new ApiError(400, "Missing required parameter: 'payload'.", { param: 'payload' });
        return resolveReferences(deps().media, principal.userId, (body as { payload: unknown }).payload);
      },
    }),
    route({
      method: 'get',
      path: '/v1/media',
      summary: "List the caller's media, newest first (limit, offset)",
      access: 'user',
      response: { schema: mediaList },
      handler: ({ principal, req }) => listMedia(deps().media, principal.userId, parsePage(req.query)),
    }),
    route({
      method: 'get',
      path: '/v1/media/signed/*key',
      summary: 'Download through a signed URL (filesystem storage; the signature is the credential)',
      access: 'public',
      response: { contentType: 'image/*' },
      async handler({ req, res }) {
        const signed = deps().signed;
        if (!signed) throw new ApiError(404, 'Signed URLs are served by the storage service in this configuration');
        await serveSigned(signed, req, res);
      },
    }),
    route({
      method: 'put',
      path: '/v1/media/signed/*key',
      summary: 'Direct upload through a signed URL (filesystem storage)',
      access: 'public',
      body: 'stream',
      async handler({ req, res }) {
        const signed = deps().signed;
        if (!signed) {
          req.resume();
          throw new ApiError(404, 'Signed URLs are served by the storage service in this configuration');
        }
        await acceptSignedUpload(signed, req, res);
      },
    }),
    route({
      method: 'get',
      path: '/v1/media/:id',
      summary: 'Metadata of one media, with a fresh download URL',
      access: 'user',
      response: { schema: mediaObject },
      handler: ({ principal, params }) => getMedia(deps().media, principal.userId, String(params.id)),
    }),
    route({
      method: 'get',
      path: '/v1/media/:id/content',
      summary: 'The stored bytes, with the stored content type',
      access: 'user',
      response: { contentType: 'image/*' },
      async handler({ req, principal, params, res }) {
        const headers = (mimeType: string, size: number) => ({
          'content-type': mimeType,
          'content-length': String(size),
          'x-content-type-options': 'nosniff',
          // As on the signed route: served from the API's own origin, the bytes never run as a document.
          'content-security-policy': "default-src 'none'; sandbox",
          'cache-control': 'private, max-age=0',
        });
        // HEAD (which Express routes here) needs the size, not the bytes: opening the object would
        // start a download from S3 only to throw it away.
        if (req.method === 'HEAD') {
          const { row, size } = await statContent(deps().media, principal.userId, String(params.id));
          res.status(200).set(headers(row.mime_type, size)).end();
          return;
        }
        const { row, object } = await openContent(deps().media, principal.userId, String(params.id));
        res.status(200).set(headers(row.mime_type, object.size));
        // pipeline, not pipe: a client that goes away mid-download must release the object's
        // stream (a file descriptor, or a connection of the S3 client's pool), not leave it paused.
        pipeline(object.body, res, () => {});
      },
    }),
    route({
      method: 'delete',
      path: '/v1/media/:id',
      summary: 'Delete one media (its object goes once nothing references it)',
      access: 'user',
      response: { schema: mediaDeleted },
      handler: ({ principal, params }) => deleteMedia(deps().media, principal.userId, String(params.id)),
    }),
    route({
      method: 'post',
      path: '/v1/media/:id/complete',
      summary: 'Finalise a direct upload: validate, sanitise, hash and deduplicate the uploaded object',
      access: 'user',
      response: { status: 201, schema: mediaObject },
      async handler({ principal, params, res }) {
        const result = await completeUpload(deps().media, principal.userId, String(params.id));
        res.status(result.deduped ? 200 : 201).json(result.media);
      },
    }),
  ];
}
