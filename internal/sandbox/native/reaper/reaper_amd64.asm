# The sandbox's reaper for a direct start, as a static x86-64 Linux
# program of a few instructions (no libc, no Go runtime): PID 1 of the
# sandbox executes it once the command runs. It reads the command's pid
# (8 bytes) from fd 6, reaps every process until the command ends, kills
# all that is left (kill(-1, SIGKILL)), reaps them, and writes a 12-byte
# report to fd 4: the command's wait status, 1 if the command was reaped
# (else 0), 1 if /tmp has no block left (else 0), all 32-bit, native
# order. Anywhere but as PID 1 it reports nothing done (all zero) and
# exits. Built by gen.sh into reaper_amd64.elf (embedded).
	.intel_syntax noprefix
	.globl _start
	.text
_start:
	sub rsp, 256
	mov qword ptr [rsp+16], 0	# report: status, reaped
	mov dword ptr [rsp+24], 0	# report: tmp full
	mov qword ptr [rsp], 0
	# Only ever as PID 1 of its own PID namespace: kill(-1) below would
	# otherwise reach every process this user may signal.
	mov eax, 39			# getpid
	syscall
	cmp rax, 1
	jne write
	# read(6, rsp, 8): the command's pid
	mov edi, 6
	mov rsi, rsp
	mov edx, 8
	xor eax, eax
	syscall
	cmp rax, 8
	jne report
	mov r12, qword ptr [rsp]
wait:
	# wait4(-1, rsp+8, 0, NULL)
	mov edi, -1
	lea rsi, [rsp+8]
	xor edx, edx
	xor r10d, r10d
	mov eax, 61
	syscall
	cmp rax, -4			# EINTR
	je wait
	test rax, rax
	js report			# ECHILD: nothing left to wait for
	cmp rax, r12
	jne wait
	mov eax, dword ptr [rsp+8]
	mov dword ptr [rsp+16], eax
	mov dword ptr [rsp+20], 1
	# kill(-1, SIGKILL): nothing outlives the command
	mov edi, -1
	mov esi, 9
	mov eax, 62
	syscall
reap:
	mov edi, -1
	xor esi, esi
	xor edx, edx
	xor r10d, r10d
	mov eax, 61
	syscall
	cmp rax, -4
	je reap
	test rax, rax
	jns reap
report:
	# statfs("/tmp", rsp+64): f_bavail is at offset 32
	lea rdi, [rip+tmp]
	lea rsi, [rsp+64]
	mov eax, 137
	syscall
	test rax, rax
	jnz write
	cmp qword ptr [rsp+96], 0
	jne write
	mov dword ptr [rsp+24], 1
write:
	# write(4, rsp+16, 12)
	mov edi, 4
	lea rsi, [rsp+16]
	mov edx, 12
	mov eax, 1
	syscall
	# exit_group(0)
	xor edi, edi
	mov eax, 231
	syscall
	hlt
tmp:
	.asciz "/tmp"
