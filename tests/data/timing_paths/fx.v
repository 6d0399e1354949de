// smartsage timing_paths fixture: a few register-to-register paths of different lengths
module fx(input clk, input din, output dout);
  // scan chain (harness style) loads all inputs serially
  reg [63:0] chain_in;
  always @(posedge clk) chain_in <= {chain_in[62:0], din};
  // 1) a 24-bit adder: carry chain
  reg [23:0] acc;
  always @(posedge clk) acc <= acc + chain_in[23:0];
  // 2) a deep LUT cone: a mix of xor/and/or over 32 bits, three rounds
  reg [15:0] mix;
  wire [31:0] m0 = chain_in[63:32] ^ {chain_in[30:0], chain_in[31]};
  wire [31:0] m1 = m0 & {m0[27:0], m0[31:28]} | {m0[12:0], m0[31:13]};
  wire [31:0] m2 = m1 ^ {m1[20:0], m1[31:21]} ^ (m1 >> 7);
  always @(posedge clk) mix <= m2[15:0] ^ m2[31:16] ^ {16{^m2}};
  // 3) a short path: one LUT
  reg [7:0] shortr;
  always @(posedge clk) shortr <= chain_in[7:0] & chain_in[15:8];
  // 4) a multiply: DSP, registered outside
  reg [17:0] a18, b18;
  reg [35:0] prod;
  always @(posedge clk) begin a18 <= chain_in[17:0]; b18 <= chain_in[40:23]; prod <= a18 * b18; end
  // 5) a block RAM with registered read and a comparison after it
  reg [15:0] mem [0:1023];
  reg [15:0] rd;
  reg hit;
  always @(posedge clk) begin
    if (chain_in[0]) mem[chain_in[10:1]] <= chain_in[26:11];
    rd <= mem[chain_in[36:27]];
    hit <= rd == acc[15:0];
  end
  // 6) a LUT RAM (TRELLIS_DPR16X4): asynchronous read into a register
  reg [3:0] lram [0:15];
  reg [3:0] lrd;
  always @(posedge clk) begin
    if (chain_in[44]) lram[chain_in[48:45]] <= chain_in[52:49];
    lrd <= lram[acc[3:0]] ^ lram[mix[3:0]];
  end
  // outputs: a scan-out chain
  reg [63:0] chain_out;
  always @(posedge clk)
    if (chain_in[63]) chain_out <= {acc, mix, shortr, hit, prod[10:0], lrd};
    else chain_out <= {chain_out[62:0], 1'b0};
  assign dout = chain_out[63];
endmodule
