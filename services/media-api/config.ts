// media-api's settings are the media domain's (shared with the media-dedup worker): MEDIA_*, S3_*.
export { mediaConfigShape, storageDriverOf, type MediaConfig } from '../../domains/media/index.js';
