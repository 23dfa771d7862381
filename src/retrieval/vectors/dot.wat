;; Dot products of one query against every row of a row-major f32 matrix, with 128-bit SIMD.
;; Assembled by `npm run build:wasm` (scripts/build-wasm.ts) into dot-wasm.ts.
(module
  (memory (export "memory") 1)
  ;; scores[r] = sum_i matrix[r*dims + i] * query[i]; dims is a multiple of 4.
  (func (export "scan") (param $matrix i32) (param $rows i32) (param $dims i32) (param $query i32) (param $scores i32)
    (local $r i32) (local $i i32) (local $row i32) (local $acc v128) (local $acc2 v128) (local $bytes i32)
    (local.set $bytes (i32.shl (local.get $dims) (i32.const 2)))
    (local.set $row (local.get $matrix))
    (block $done
      (loop $rows_loop
        (br_if $done (i32.ge_u (local.get $r) (local.get $rows)))
        (local.set $acc (v128.const f32x4 0 0 0 0))
        (local.set $acc2 (v128.const f32x4 0 0 0 0))
        (local.set $i (i32.const 0))
        ;; two accumulators over 8 floats per step, then a tail of 4
        (block $cols_done
          (loop $cols
            (br_if $cols_done (i32.gt_u (i32.add (local.get $i) (i32.const 32)) (local.get $bytes)))
            (local.set $acc (f32x4.add (local.get $acc)
              (f32x4.mul (v128.load (i32.add (local.get $row) (local.get $i)))
                         (v128.load (i32.add (local.get $query) (local.get $i))))))
            (local.set $acc2 (f32x4.add (local.get $acc2)
              (f32x4.mul (v128.load offset=16 (i32.add (local.get $row) (local.get $i)))
                         (v128.load offset=16 (i32.add (local.get $query) (local.get $i))))))
            (local.set $i (i32.add (local.get $i) (i32.const 32)))
            (br $cols)))
        (if (i32.lt_u (local.get $i) (local.get $bytes))
          (then
            (local.set $acc (f32x4.add (local.get $acc)
              (f32x4.mul (v128.load (i32.add (local.get $row) (local.get $i)))
                         (v128.load (i32.add (local.get $query) (local.get $i))))))))
        (local.set $acc (f32x4.add (local.get $acc) (local.get $acc2)))
        (f32.store (i32.add (local.get $scores) (i32.shl (local.get $r) (i32.const 2)))
          (f32.add
            (f32.add (f32x4.extract_lane 0 (local.get $acc)) (f32x4.extract_lane 1 (local.get $acc)))
            (f32.add (f32x4.extract_lane 2 (local.get $acc)) (f32x4.extract_lane 3 (local.get $acc)))))
        (local.set $row (i32.add (local.get $row) (local.get $bytes)))
        (local.set $r (i32.add (local.get $r) (i32.const 1)))
        (br $rows_loop))))
)
