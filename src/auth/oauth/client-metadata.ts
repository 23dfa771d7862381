import { z } from 'zod';

/** Client metadata rules shared by registration (clients.ts) and metadata documents (metadata-document.ts). */

export const MAX_REDIRECT_URIS = 10;

/** Shown on the consent page: no control or bidi-override characters that could disguise it. */
export const ClientName = z
  .string()
  .trim()
  .max(200)
  .refine((v) => !/[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/.test(v), 'must not hold control or bidi characters')
  .optional();
