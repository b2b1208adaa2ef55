# The row kernels modc generates from modk.rows, for the kernel tests: the
# ops of test/common/RowKernels.mlir through modk-generalize, then only their
# kernels through mod-translate (--modk-rows-to-cpp or --modk-rows-to-cuda),
# as modc writes them into a package. The tests include the result.

# modc_generate_row_kernels(TARGET OUT): TARGET is cpp or cuda; OUT names the
# generated file in the current binary directory.
function(modc_generate_row_kernels target out)
  set(input ${PROJECT_SOURCE_DIR}/test/common/RowKernels.mlir)
  set(generalized ${CMAKE_CURRENT_BINARY_DIR}/RowKernels.${target}.mlir)
  add_custom_command(
    OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/${out}
    COMMAND $<TARGET_FILE:mod-opt>
            "--pass-pipeline=builtin.module(modk-generate-optimizer,modk.entry(modk-generalize))"
            ${input} -o ${generalized}
    COMMAND $<TARGET_FILE:mod-translate> --modk-rows-to-${target} ${generalized}
            -o ${CMAKE_CURRENT_BINARY_DIR}/${out}
    DEPENDS ${input} mod-opt mod-translate
    COMMENT "Generating the ${target} row kernels of the kernel tests"
    VERBATIM)
endfunction()
