;; Dot products of one query against every row of a row-major int8 matrix, with 128-bit SIMD.
;; Assembled by `npm run build:wasm` (scripts/build-wasm.ts) into dot-wasm.ts, twice: as it is,
;; and with the memory imported as shared (the build rewrites the import line) so that a helper
;; thread can scan part of the same rows (scan-helper.ts).
(module
  (import "env" "memory" (memory 1))
  ;; scores[r] = f32(sum_i matrix[r*stride + i] * query[i]) * scales[r]
  ;; matrix: int8 rows of `stride` bytes (a multiple of 16, zero-padded); query: `stride` int16;
  ;; scales: one f32 per row. The caller keeps |query[i]| small enough that no i32 lane overflows.
  (func (export "scan") (param $matrix i32) (param $rows i32) (param $stride i32) (param $query i32) (param $scales i32) (param $scores i32)
    (local $r i32) (local $i i32) (local $row i32) (local $acc v128) (local $acc2 v128) (local $v v128) (local $q i32)
    (local.set $row (local.get $matrix))
    (block $done
      (loop $rows_loop
        (br_if $done (i32.ge_u (local.get $r) (local.get $rows)))
        (local.set $acc (v128.const i32x4 0 0 0 0))
        (local.set $acc2 (v128.const i32x4 0 0 0 0))
        (local.set $i (i32.const 0))
        (local.set $q (local.get $query))
;; 32 int8 of the row per step (stride is a multiple of 16: a last half step may follow),
        ;; widened to i16x8 and multiplied-added against the query into two accumulators
        (block $cols_done
          (loop $cols
            (br_if $cols_done (i32.gt_u (i32.add (local.get $i) (i32.const 32)) (local.get $stride)))
            (local.set $v (v128.load (i32.add (local.get $row) (local.get $i))))
            (local.set $acc (i32x4.add (local.get $acc)
              (i32x4.dot_i16x8_s (i16x8.extend_low_i8x16_s (local.get $v)) (v128.load (local.get $q)))))
            (local.set $acc2 (i32x4.add (local.get $acc2)
              (i32x4.dot_i16x8_s (i16x8.extend_high_i8x16_s (local.get $v)) (v128.load offset=16 (local.get $q)))))
            (local.set $v (v128.load offset=16 (i32.add (local.get $row) (local.get $i))))
            (local.set $acc (i32x4.add (local.get $acc)
              (i32x4.dot_i16x8_s (i16x8.extend_low_i8x16_s (local.get $v)) (v128.load offset=32 (local.get $q)))))
            (local.set $acc2 (i32x4.add (local.get $acc2)
              (i32x4.dot_i16x8_s (i16x8.extend_high_i8x16_s (local.get $v)) (v128.load offset=48 (local.get $q)))))
            (local.set $i (i32.add (local.get $i) (i32.const 32)))
            (local.set $q (i32.add (local.get $q) (i32.const 64)))
            (br $cols)))
        (if (i32.lt_u (local.get $i) (local.get $stride))
          (then
            (local.set $v (v128.load (i32.add (local.get $row) (local.get $i))))
            (local.set $acc (i32x4.add (local.get $acc)
              (i32x4.dot_i16x8_s (i16x8.extend_low_i8x16_s (local.get $v)) (v128.load (local.get $q)))))
            (local.set $acc2 (i32x4.add (local.get $acc2)
              (i32x4.dot_i16x8_s (i16x8.extend_high_i8x16_s (local.get $v)) (v128.load offset=16 (local.get $q)))))))
        (local.set $acc (i32x4.add (local.get $acc) (local.get $acc2)))
        (f32.store (i32.add (local.get $scores) (i32.shl (local.get $r) (i32.const 2)))
          (f32.mul
            (f32.convert_i32_s
              (i32.add
                (i32.add (i32x4.extract_lane 0 (local.get $acc)) (i32x4.extract_lane 1 (local.get $acc)))
                (i32.add (i32x4.extract_lane 2 (local.get $acc)) (i32x4.extract_lane 3 (local.get $acc)))))
            (f32.load (i32.add (local.get $scales) (i32.shl (local.get $r) (i32.const 2))))))
        (local.set $row (i32.add (local.get $row) (local.get $stride)))
        (local.set $r (i32.add (local.get $r) (i32.const 1)))
        (br $rows_loop))))
)
